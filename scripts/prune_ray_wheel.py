"""Repack ray's wheel under the device tool's 64 MiB carry limit (docs/pool.md): drop ray/jars/
(Java, unused from Python) and the dashboard's JS source maps, and rewrite RECORD so pip
accepts the result.  Usage: python3 scripts/prune_ray_wheel.py IN.whl OUT_DIR"""

from __future__ import annotations

import base64
import hashlib
import sys
import zipfile
from pathlib import Path


def _dropped(name: str) -> bool:
    return name.startswith("ray/jars/") or (name.startswith("ray/dashboard/") and name.endswith(".map"))


def main(src: Path, out_dir: Path) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    dst = out_dir / src.name
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(dst, "w", zipfile.ZIP_DEFLATED, compresslevel=9) as zout:
        record_name = next(n for n in zin.namelist() if n.endswith(".dist-info/RECORD"))
        rows = []
        for info in zin.infolist():
            if _dropped(info.filename) or info.filename == record_name or info.is_dir():
                continue
            data = zin.read(info)
            zout.writestr(info, data, compress_type=zipfile.ZIP_DEFLATED, compresslevel=9)
            digest = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode()
            rows.append(f"{info.filename},sha256={digest},{len(data)}")
        rows.append(f"{record_name},,")
        zout.writestr(record_name, "\n".join(rows) + "\n")
    print(f"{dst}: {dst.stat().st_size / 2**20:.1f} MiB")


if __name__ == "__main__":
    if len(sys.argv) != 3:
        sys.exit(__doc__.splitlines()[-1].strip())
    main(Path(sys.argv[1]), Path(sys.argv[2]))
