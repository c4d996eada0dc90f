"""verl's multi-turn SFT dataset for our RFT parquet (``data.custom_cls`` of stage 2).

Two fixes over reading :mod:`.rft` rows with the stock class: ``tools`` is stored as a JSON
string (decoded here; see rft.py for why), and parquet gives every message every key of
the union struct (``tool_calls: None`` on a user message, ``reasoning_content: None``...),
which chat templates can render as text; keys whose value is None are dropped.

The stock class keeps the parquet columns Arrow-backed (``dtype_backend="pyarrow"``) and
reads a row with ``iloc``; with the pandas/pyarrow of the H200 image that raised
``ArrowIndexError`` on the nested ``messages`` column (list of structs). The decoded, cleaned
messages go back into the frame as plain Python objects, so a row never touches Arrow's
nested accessors.
"""

from __future__ import annotations

import json
from typing import Any

import pandas as pd

from verl.utils.dataset.multiturn_sft_dataset import MultiTurnSFTDataset


def _clean(message: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in message.items() if v is not None}


class RFTDataset(MultiTurnSFTDataset):
    """Rows written by :func:`cuda_agent.train.rft.build_rft`."""

    def _read_files_and_process(self) -> None:
        super()._read_files_and_process()
        if self.tools is not None:
            self.tools = [json.loads(t) if isinstance(t, str) else t for t in self.tools]
        self.messages = [[_clean(m) for m in msgs] for msgs in self.messages]
        frame = self.dataframe.drop(columns=[c for c in (self.messages_key, self.tools_key)
                                             if c in self.dataframe.columns]).reset_index(drop=True)
        frame[self.messages_key] = pd.Series(self.messages, dtype=object)
        self.dataframe = frame

    def _build_messages(self, example: dict) -> list:
        return [_clean(m) for m in super()._build_messages(example)]
