"""Training on verl: the paper's four-stage recipe (single-turn PPO warm-up, rejection
fine-tuning, value pretraining, agentic PPO).

``data`` turns tasks into verl parquet, ``reward_fn`` is the stage-1 reward, ``agent_loop``
runs our ReAct episode inside verl's rollout (stages 3-4), ``rft`` turns kept trajectories
into SFT parquet (stage 2) read by ``sft_dataset``, ``stages`` builds the launch commands
from the YAML files in ``configs/``, ``hf_rollout`` is verl's ``rollout.name=hf`` backend
(transformers ``generate``), ``chain`` runs the four stages on one GPU with a tiny model, and
``cli`` is ``cuda-agent train``.  Only ``agent_loop``, ``hf_rollout`` and ``sft_dataset``
import verl.
"""

from pathlib import Path

CONFIG_DIR = Path(__file__).resolve().parent / "configs"
