"""One-off: the 2026-12-06 H100 agreement run was cut by KB_LIMIT before the script could write its table
(the script now writes it when cut); rebuild the table from its raw files with the script's own judge."""
import json, re, sys, types
from pathlib import Path
sys.path.insert(0, 'scripts'); sys.path.insert(0, 'src')
import kb_agreement as K
R = Path(sys.argv[1]); out = Path(sys.argv[2]); out.mkdir(parents=True, exist_ok=True)
prog = {}
for l in open(R / 'agreement.log'):
    m = re.match(r'\[\s*(\d+) s\] (\S+)\s+(\S+)\s+(\S+)\s+\(([\d.]+) s\)', l)
    if m: prog.setdefault(m[2], {})[m[3]] = (m[4], float(m[5]))
cases = K._corpus().load("cuda")
skipped = [c for c in cases if c.id not in prog]  # never started on the device: its toolchain was missing there
results = {}
for c in cases:
    p = prog.get(c.id, {})
    if not all(w in p for w in ('KernelBench', 'kernelbench', 'strict')):
        continue
    kb = json.loads((R / 'raw' / f'{c.id}.kb.json').read_text()) if (R / 'raw' / f'{c.id}.kb.json').is_file() else {}
    kb['verdict'], kb['wall_s'] = p['KernelBench']
    ours = {}
    for rules in ('kernelbench', 'strict'):
        t = (R / 'raw' / f'{c.id}.{rules}.log').read_text()
        lines = [ln for ln in t.splitlines() if ln.startswith('{')]
        try:
            d = json.loads(lines[-1])
        except Exception:  # the log kept only the last 3000 characters: the verdict from the progress log
            m = re.search(r'"exploit_classes": \[([\d, ]*)\]', t)
            d = {'exploit_classes': [int(x) for x in m[1].split(',') if x.strip()] if m else [], 'truncated_log': True}
        d['verdict'], d['wall_s'] = p[rules]
        ours[rules] = d
    results[c.id] = {'kb': kb, 'ours': ours}
a = types.SimpleNamespace(workers=8, kb_tolerance=None, our_args='')
K.platform.node = lambda: 'vm'
import torch; torch.cuda.get_device_name = lambda: 'NVIDIA H100 80GB HBM3'; torch.cuda.is_available = lambda: True
torch.__version__ = '2.11.0+cu130'
K.write_report(cases, skipped, results, a, out, 330.0, 'timeout KB_LIMIT=330 s, rebuilt from raw files')
