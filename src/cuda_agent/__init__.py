"""cuda_agent: agentic RL for CUDA kernel generation.

Parts (one sub-package each): ``tasks`` (the problem format), ``sandbox`` (the
evaluator: workspace, build, verify, time), ``reward``, ``agent``, ``synth``,
``train``, ``eval``, and a thin ``cli``.
"""

__version__ = "0.1.0"
