"""Semantic-cache quality: recall and wrong answers on the in-house evaluation set, per split.

Every pair goes through the gateway's lookup path (near-repeat normalisation, all-MiniLM-L6-v2, threshold,
verifier) via `gateway.cache.calibrate`. Thresholds and word lists are chosen on `split="tune"` only; the
`holdout` rows are the out-of-sample figures. The set (`tests/data/semantic_eval.jsonl`) was written in-house.

    taskset -c 1 python bench/semantic_quality.py [--max-wrong 0.015] [--misses tune|pairs]
        [--pairs tests/data/verifier_dev.jsonl] [--holdout]

`--misses tune` also lists the tune pairs decided wrongly at the chosen threshold, `--misses pairs` those of
the `--pairs` files (pairs we wrote ourselves). There is no way to list holdout pairs, and without
`--holdout` the holdout half is not scored at all.
"""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("LLM_GATEWAY_EMBED_THREADS", "1")

from gateway.cache.calibrate import (  # noqa: E402
    LabelledPair,
    best,
    load_pairs,
    score,
    similarities,
    sweep,
    window_fits,
)

THRESHOLDS = tuple(round(0.70 + 0.02 * i, 2) for i in range(15))
KINDS_SAME = ("reword", "near_repeat")
KINDS_TRAP = ("negation", "swap", "number", "scope")


class CachedEncoder:
    """Embeddings remembered per text in an .npz, so a verifier change re-runs in seconds."""

    def __init__(self, encoder, path: str | None) -> None:
        import numpy as np

        self._encoder, self._path = encoder, path
        self._known: dict[str, np.ndarray] = {}
        if path and Path(path).exists():
            data = np.load(path, allow_pickle=False)
            self._known = dict(zip(data["texts"].tolist(), data["vectors"], strict=True))

    def encode(self, texts: list[str]):
        import numpy as np

        todo = [t for t in dict.fromkeys(texts) if t not in self._known]
        if todo:
            self._known.update(zip(todo, self._encoder.encode(todo), strict=True))
        return np.stack([self._known[t] for t in texts])

    def save(self) -> None:
        import numpy as np

        if self._path:
            texts = list(self._known)
            np.savez(self._path, texts=np.array(texts), vectors=np.stack([self._known[t] for t in texts]))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--max-wrong", type=float, default=0.015, help="wrong-answer budget on tune")
    parser.add_argument("--threshold", type=float, help="report at this threshold instead of choosing one")
    parser.add_argument("--misses", choices=("tune", "pairs"), help="list tune (or --pairs) pairs decided wrongly")
    parser.add_argument("--holdout", action="store_true", help="also report the holdout split (once, at the end)")
    parser.add_argument("--pairs", action="append", default=[],
                        help="also report a labelled pair file of our own (calibrate's format), e.g. the dev set")
    parser.add_argument("--vectors", help="cache embeddings in this .npz between runs (for tuning the verifier)")
    args = parser.parse_args(argv)

    from gateway.cache.embedder import shared_embedder
    from tests.cache.eval_set import load_eval

    # The holdout is not even scored unless asked for: nothing about it can leak into a tuning run.
    splits = ("tune", "holdout") if args.holdout else ("tune",)
    pairs = {split: [LabelledPair(p.a, p.b, p.same, {"kind": p.kind, "lang": p.lang}) for p in load_eval(split)]
             for split in splits}
    for path in args.pairs:
        pairs[path] = [LabelledPair(p.a, p.b, p.same, {"kind": p.extra.get("kind", "reword" if p.same else "swap"),
                                                       "lang": p.extra.get("lang", "en")})
                       for p in load_pairs(path)]
    encoder = CachedEncoder(shared_embedder(), args.vectors)
    results = {split: score(ps, similarities(ps, encoder), window_fits(ps)) for split, ps in pairs.items()}
    encoder.save()

    tune_rows = sweep(results["tune"], THRESHOLDS, use_verifier=True)
    chosen = best(tune_rows, args.max_wrong)
    threshold = args.threshold if args.threshold is not None else (chosen.threshold if chosen else THRESHOLDS[-1])
    print(f"sweep on tune (verifier on), wrong-answer budget {args.max_wrong:.3f}: chosen threshold {threshold:.2f}")
    print("| threshold | tune recall | tune wrong | tune recall, no verifier | tune wrong, no verifier |")
    print("|---|---|---|---|---|")
    raw_rows = sweep(results["tune"], THRESHOLDS, use_verifier=False)
    for ver, raw in zip(tune_rows, raw_rows, strict=True):
        print(f"| {ver.threshold:.2f} | {ver.recall:.3f} | {ver.wrong:.3f} | {raw.recall:.3f} | {raw.wrong:.3f} |")
    print()
    print(f"at threshold {threshold:.2f}:")
    print("| split | pairs (same / traps) | recall, verifier | wrong answers, verifier | recall, cosine only "
          "| wrong answers, cosine only |")
    print("|---|---|---|---|---|---|")
    for split in (*splits, *args.pairs):
        (ver,) = sweep(results[split], (threshold,), use_verifier=True)
        (raw,) = sweep(results[split], (threshold,), use_verifier=False)
        print(f"| {split} | {ver.same} / {ver.different} | {ver.recall:.3f} ({ver.served_same}) | "
              f"{ver.wrong:.3f} ({ver.served_different}) | {raw.recall:.3f} ({raw.served_same}) | "
              f"{raw.wrong:.3f} ({raw.served_different}) |")
    print()
    print("per kind at that threshold, verifier on (share served):")
    print("| split | " + " | ".join(KINDS_SAME + KINDS_TRAP) + " |")
    print("|---|" + "---|" * (len(KINDS_SAME) + len(KINDS_TRAP)))
    for split in (*splits, *args.pairs):
        cells = []
        for kind in KINDS_SAME + KINDS_TRAP:
            rs = [r for r in results[split] if r.pair.extra["kind"] == kind]
            served = sum(r.verified and r.similarity >= threshold for r in rs)
            cells.append(f"{served}/{len(rs)}")
        print(f"| {split} | " + " | ".join(cells) + " |")
    print()
    print("per language at that threshold, verifier on (served / pairs):")
    print("| split | language | should-hits served | traps served |")
    print("|---|---|---|---|")
    for split in (*splits, *args.pairs):
        for lang in sorted({r.pair.extra["lang"] for r in results[split]}):
            rs = [r for r in results[split] if r.pair.extra["lang"] == lang]
            same = [r for r in rs if r.pair.same]
            traps = [r for r in rs if not r.pair.same]
            hits = sum(r.verified and r.similarity >= threshold for r in same)
            wrong = sum(r.verified and r.similarity >= threshold for r in traps)
            print(f"| {split} | {lang} | {hits}/{len(same)} | {wrong}/{len(traps)} |")
    if args.misses:
        print()
        for r in (r for name in (args.pairs if args.misses == "pairs" else ["tune"]) for r in results[name]):
            served = r.verified and r.similarity >= threshold
            if served != r.pair.same:
                tag = "SERVED TRAP" if served else f"missed ({r.reason or 'below threshold'})"
                print(f"{tag:32s} {r.similarity:.3f} {r.pair.extra['kind']:11s} {r.pair.a!r} | {r.pair.b!r}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
