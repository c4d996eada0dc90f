"""NotebookEdit: replace, insert or delete one cell of a Jupyter notebook (.ipynb).

The cell is chosen by ``cell_id`` (the nbformat 4.5 id) or ``cell_index`` (0-based).
Insert puts the new cell after the chosen cell (or first, when neither is given).
Replacing a code cell's source clears its outputs and execution count.
"""

from __future__ import annotations

import json
import secrets
from typing import Any

from .base import Tool, ToolContext, ToolFailure, register_tool, schema


def _source_lines(text: str) -> list[str]:
    return text.splitlines(keepends=True)


def notebook_edit(ctx: ToolContext, notebook_path: str, new_source: str | None = None,
                  cell_id: str | None = None, cell_index: int | None = None,
                  cell_type: str | None = None, edit_mode: str = "replace") -> str:
    p = ctx.resolve(notebook_path, must_exist=True, what="notebook_path")
    if p.suffix != ".ipynb":
        raise ToolFailure(f"{notebook_path} is not a .ipynb notebook; use Edit for other files")
    if edit_mode not in ("replace", "insert", "delete"):
        raise ToolFailure("edit_mode must be replace, insert or delete")
    if cell_type is not None and cell_type not in ("code", "markdown", "raw"):
        raise ToolFailure("cell_type must be code, markdown or raw")
    try:
        nb = json.loads(p.read_text())
        cells: list[dict[str, Any]] = nb["cells"]
        assert isinstance(cells, list)
    except (ValueError, KeyError, AssertionError, TypeError):
        raise ToolFailure(f"{notebook_path} is not a valid notebook (JSON with a 'cells' list)") from None

    idx: int | None = None
    if cell_id is not None:
        ids = [c.get("id") for c in cells]
        if cell_id not in ids:
            raise ToolFailure(f"no cell with id {cell_id!r} (ids: {', '.join(str(i) for i in ids) or 'none'})")
        idx = ids.index(cell_id)
    elif cell_index is not None:
        try:
            idx = int(cell_index)
        except (TypeError, ValueError):
            raise ToolFailure("cell_index must be an integer") from None
        if not (-1 <= idx <= len(cells) - 1) or (edit_mode != "insert" and idx < 0):
            raise ToolFailure(f"cell_index {idx} is out of range: the notebook has {len(cells)} cells")
    elif edit_mode != "insert":
        raise ToolFailure("give cell_id or cell_index of the cell to " + edit_mode)

    if edit_mode == "delete":
        gone = cells.pop(idx)  # type: ignore[arg-type]
        msg = f"Deleted cell {idx} ({gone.get('cell_type', '?')}) of {ctx.rel(p)}; {len(cells)} cells left."
    else:
        if not isinstance(new_source, str):
            raise ToolFailure("new_source (string) is required to " + edit_mode + " a cell")
        if edit_mode == "insert":
            ctype = cell_type or "code"
            cell: dict[str, Any] = {"cell_type": ctype, "metadata": {}, "source": _source_lines(new_source)}
            if nb.get("nbformat", 4) >= 4 and nb.get("nbformat_minor", 0) >= 5 or any("id" in c for c in cells):
                cell["id"] = secrets.token_hex(4)
            if ctype == "code":
                cell.update(outputs=[], execution_count=None)
            pos = 0 if idx is None else idx + 1
            cells.insert(pos, cell)
            msg = f"Inserted a {ctype} cell at index {pos} of {ctx.rel(p)}" + (
                f" (id {cell['id']})" if "id" in cell else "") + "."
        else:
            cell = cells[idx]  # type: ignore[index]
            cell["source"] = _source_lines(new_source)
            if cell_type and cell_type != cell.get("cell_type"):
                cell["cell_type"] = cell_type
                if cell_type == "code":
                    cell.setdefault("outputs", [])
                    cell.setdefault("execution_count", None)
                else:
                    cell.pop("outputs", None)
                    cell.pop("execution_count", None)
            if cell.get("cell_type") == "code":
                cell["outputs"] = []
                cell["execution_count"] = None
            msg = f"Replaced the source of cell {idx} of {ctx.rel(p)}."
    p.write_text(json.dumps(nb, indent=1, ensure_ascii=False) + "\n")
    ctx.note_read(p)
    return msg


register_tool(Tool(
    "NotebookEdit",
    "Edit one cell of a Jupyter notebook: replace its source, insert a new cell after it, or "
    "delete it. Choose the cell by cell_id or by 0-based cell_index.",
    schema({
        "notebook_path": {"type": "string", "description": "Path of the .ipynb file."},
        "new_source": {"type": "string", "description": "New source of the cell (replace/insert)."},
        "cell_id": {"type": "string", "description": "Id of the cell."},
        "cell_index": {"type": "integer", "description": "0-based index of the cell (insert: the new cell goes after it; -1 = first)."},
        "cell_type": {"type": "string", "enum": ["code", "markdown", "raw"]},
        "edit_mode": {"type": "string", "enum": ["replace", "insert", "delete"], "description": "Default replace."},
    }, ["notebook_path"]),
    notebook_edit))
