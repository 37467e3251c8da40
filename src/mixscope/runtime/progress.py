"""Progress for long runs: a bar with tokens/s and ETA on a terminal, periodic lines in logs."""

from __future__ import annotations

import sys
import time


class Progress:
    def __init__(self, total_docs: int, done_docs: int, label: str, enabled: bool = True) -> None:
        self.total = total_docs
        self.done = done_docs
        self.session_docs = 0
        self.tokens = 0
        self.start = time.time()
        self.last_line = 0.0
        self.enabled = enabled
        self.bar = None
        if enabled and sys.stderr.isatty():
            from tqdm.auto import tqdm

            self.bar = tqdm(
                total=total_docs, initial=done_docs, unit="doc", desc=label, dynamic_ncols=True
            )

    def update(self, docs: int, tokens: int) -> None:
        self.done += docs
        self.session_docs += docs
        self.tokens += tokens
        rate = self.tokens / max(time.time() - self.start, 1e-9)
        if self.bar is not None:
            self.bar.update(docs)
            self.bar.set_postfix_str(f"{rate:,.0f} tok/s")
        elif self.enabled and (time.time() - self.last_line > 10 or self.done == self.total):
            self.last_line = time.time()
            docs_rate = self.session_docs / max(time.time() - self.start, 1e-9)
            eta = (self.total - self.done) / docs_rate if docs_rate > 0 else float("inf")
            print(
                f"mixscope: {self.done}/{self.total} docs, {rate:,.0f} tok/s, ETA {eta:,.0f}s",
                file=sys.stderr,
                flush=True,
            )

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()
