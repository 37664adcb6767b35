"""The browser app of the ``export`` artifact: the page, the model variants, a sample subgraph, ``web.json``.

The ``export`` artifact is itself the web folder (artifacts are flat): ``index.html``, ``app.mjs`` and
``strata.mjs`` (copied from the project's ``web/``), ``model.onnx`` (fp32), ``model.fp16.onnx``,
``model.int8.onnx`` (:mod:`trainer.export_variants`), ``subgraph.json`` + ``subgraph.bin``
(:mod:`trainer.subgraph_file`: the first ``export.web_seeds`` validation seeds of the sampled validation batch
and the nodes their computation trees use) and ``web.json`` (format ``strata-web``: the variants with their
file, bytes and validation accuracy, the subgraph, the onnxruntime-web version the page loads).

Each variant's validation accuracy is computed with onnxruntime (Python, CPU) on every validation batch of
the ``sample`` artifact (sample epoch 0, as training evaluates), features from the ``reorder`` artifact. Those
batches, the int8 calibration's (the first ``export.calibration_batches`` parts of the first training batches)
and the sample subgraph are cut to ``export.memory_mb`` of working memory each (:mod:`trainer.export_batches`):
a seed's prediction does not depend on the cut.

onnxruntime-web itself (~14 MB of WASM) is not in the artifact: :func:`copy_web` (``strata export --web DIR``)
adds it as ``DIR/ort/`` from the npm cache (:func:`ort_web_dir`), which makes ``DIR`` a folder that works
offline behind any static HTTP server; without it the page loads the pinned version from the CDN.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from pipelines.core.graphio import feature_dim, narrow_labels
from pipelines.core.nodeids import original_ids
from storage_kernels.sampleset import SampledBatch, SampleSet
from storage_kernels.store import MANIFEST_NAME, Artifact, ArtifactBuilder

__all__ = ["ORT_WEB_FILES", "ORT_WEB_VERSION", "PAGE_FILES", "WEB_FORMAT", "WEB_SOURCE", "build_web", "copy_web",
           "npm_cache_dir", "ort_web_dir", "variant_file"]

WEB_FORMAT = "strata-web"
#: The project's page sources, copied into every export artifact.
WEB_SOURCE = Path(__file__).resolve().parents[2] / "web"
PAGE_FILES = ("index.html", "app.mjs", "strata.mjs")
#: The onnxruntime-web release the page is written and tested against (npm ``onnxruntime-web@VERSION``).
ORT_WEB_VERSION = "1.30.0"
#: What the page loads of it (WASM backend only): the ESM entry, the Emscripten loader and the binary.
ORT_WEB_ENTRY = "ort.wasm.min.mjs"
ORT_WEB_FILES = (ORT_WEB_ENTRY, "ort-wasm-simd-threaded.mjs", "ort-wasm-simd-threaded.wasm")
ORT_WEB_CDN = f"https://cdn.jsdelivr.net/npm/onnxruntime-web@{ORT_WEB_VERSION}/dist/"


def variant_file(name: str) -> str:
    """``model.onnx`` for fp32 (the export's ONNX model), ``model.<name>.onnx`` otherwise."""
    return "model.onnx" if name == "fp32" else f"model.{name}.onnx"


def npm_cache_dir() -> Path:
    """Where Strata installs npm packages: ``$STRATA_NPM_CACHE``, else ``~/.cache/strata/npm``."""
    return Path(os.environ.get("STRATA_NPM_CACHE") or Path.home() / ".cache" / "strata" / "npm")


def ort_web_dir(cache: Path | None = None) -> Path | None:
    """The onnxruntime-web package in the npm cache when it is the pinned version, else ``None``."""
    package = (cache or npm_cache_dir()) / "node_modules" / "onnxruntime-web"
    try:
        version = json.loads((package / "package.json").read_text()).get("version")
    except (OSError, ValueError):
        return None
    if version != ORT_WEB_VERSION or not all((package / "dist" / f).is_file() for f in ORT_WEB_FILES):
        return None
    return package


def _eval_batches(samples: SampleSet) -> list[int]:
    from trainer.train import eval_batch_ids

    return eval_batch_ids(samples, "val")


def _feeds(batches: Iterable[SampledBatch], rows: Callable[[np.ndarray], np.ndarray], labels: np.ndarray
           ) -> Iterator[tuple[dict[str, np.ndarray], np.ndarray]]:
    """(onnxruntime feed, seed labels) per batch, ``rows(ids)`` giving the features in the batch's node order."""
    import torch

    from trainer.export import onnx_feed
    from trainer.models import TensorBlock

    for batch in batches:
        x = torch.from_numpy(rows(np.asarray(batch.nodes)))
        blocks = [TensorBlock.from_block(b) for b in batch.blocks()]
        yield onnx_feed(x, blocks), labels[batch.seeds]


def build_web(builder: ArtifactBuilder, onnx_path: Path, *, reorder: Artifact, sample: Artifact, web_seeds: int,
              calibration_batches: int, about: dict[str, Any], memory_bytes: int = 512 << 20,
              message_widths: Sequence[int] | None = None) -> dict[str, Any]:
    """Write the web folder into ``builder`` beside the exported ``onnx_path``; returns the stats to record
    (per variant ``<name>_bytes``, ``<name>_val_acc``, ``<name>_val_acc_delta``; ``web_seeds``, ...).

    Every batch the models run on is cut to ``memory_bytes`` of working memory (``trainer.export_batches``),
    with the model's per-layer ``message_widths`` (default: the input width, the widest they can be)."""
    from trainer.export_batches import cut_by_bytes, export_batches, feed_bytes
    from trainer.export_variants import VARIANTS, accuracy, session, to_fp16, to_int8
    from trainer.subgraph_file import restrict_batch, write_subgraph

    samples = SampleSet(sample.path)
    from trainer.features.file import read_values

    labels = narrow_labels(reorder.array("labels.npy"))  # in RAM: a map of the file faults per seed
    in_dim = feature_dim(reorder)

    def features(ids: np.ndarray) -> np.ndarray:  # aligned block reads, not a memory map's read-ahead per row
        return read_values(reorder.file("features.npy"), ids, in_dim)

    widths = list(message_widths) if message_widths is not None else [in_dim] * samples.num_layers
    val_ids = _eval_batches(samples)
    if not val_ids:
        raise ValueError(f"'{sample.path}' expected validation batches for the web export (got none)")
    train_ids = samples.batch_ids("train", 0)[:calibration_batches]
    if not train_ids:
        raise ValueError(f"'{sample.path}' expected training batches to calibrate the int8 variant (got none)")

    def cut(ids: list[int], limit: int | None = None) -> Iterator[SampledBatch]:
        return export_batches((samples.batch(i) for i in ids), memory_bytes, in_dim, widths, limit=limit)

    to_fp16(onnx_path, builder.add_file(variant_file("fp16")))
    to_int8(onnx_path, builder.add_file(variant_file("int8")),  # a bounded sample: the first parts
            (feed for feed, _ in _feeds(cut(train_ids, calibration_batches), features, labels)))

    sessions = {name: session(builder.dir / variant_file(name)) for name in VARIANTS}
    outputs: dict[str, list[np.ndarray]] = {name: [] for name in VARIANTS}
    seed_labels: list[np.ndarray] = []
    for feed, y in _feeds(cut(val_ids), features, labels):  # one pass over the features, all variants
        seed_labels.append(y)
        for name in VARIANTS:
            outputs[name].append(sessions[name].run(["logits"], feed)[0])
    variants = []
    base = accuracy(outputs["fp32"], seed_labels)
    for name in VARIANTS:
        acc = accuracy(outputs[name], seed_labels)
        agree = float(np.mean(np.concatenate([(o.argmax(1) == r.argmax(1)) for o, r
                                              in zip(outputs[name], outputs["fp32"], strict=True)])))
        variants.append({"name": name, "file": variant_file(name),
                         "bytes": (builder.dir / variant_file(name)).stat().st_size,
                         "val_acc": acc, "val_acc_delta": round(acc - base, 9), "agreement_with_fp32": agree})

    batch = samples.batch(val_ids[0])
    sub = next(cut_by_bytes(restrict_batch(batch, min(web_seeds, batch.num_seeds)), memory_bytes,
                            lambda b: feed_bytes(b, in_dim, widths)))  # fewer seeds where they are too wide
    source_ids = np.asarray(reorder.array("perm.npy")[sub.nodes])  # new id -> the source's id
    names = original_ids(reorder, source_ids)  # a graph with named nodes: the ids its input used
    extra: dict[str, Any] = {"split": "val"} if names is None else {"split": "val", "node_names": names.tolist()}
    for name in ("subgraph.json", "subgraph.bin"):
        builder.add_file(name)
    write_subgraph(builder.dir, sub, features(np.asarray(sub.nodes)), source_ids, labels[sub.seeds], extra=extra)
    for name in PAGE_FILES:
        source = WEB_SOURCE / name
        if not source.is_file():
            raise FileNotFoundError(f"'web' expected the page source {source} (got no such file; Strata runs from "
                                    "its source tree, `pip install -e .`)")
        shutil.copyfile(source, builder.add_file(name))
    num_val = int(sum(int((y >= 0).sum()) for y in seed_labels))
    manifest = {
        "format": WEB_FORMAT, "format_version": 1, **about,
        "subgraph": "subgraph.json", "num_seeds": sub.num_seeds, "num_nodes": int(sub.hop_counts[-1]),
        "num_layers": sub.num_layers, "num_val_nodes": num_val, "default_variant": "fp32", "variants": variants,
        "onnxruntime_web": {"version": ORT_WEB_VERSION, "entry": ORT_WEB_ENTRY, "local": "ort/",
                            "cdn": ORT_WEB_CDN, "files": list(ORT_WEB_FILES)},
    }
    builder.write_json("web.json", manifest)
    stats: dict[str, Any] = {"web_seeds": sub.num_seeds, "web_subgraph_nodes": int(sub.hop_counts[-1]),
                             "web_val_nodes": num_val, "export_val_batches": len(seed_labels),
                             "web_subgraph_bytes": sum((builder.dir / f).stat().st_size
                                                       for f in ("subgraph.json", "subgraph.bin"))}
    for v in variants:
        stats.update({f"{v['name']}_bytes": v["bytes"], f"{v['name']}_val_acc": v["val_acc"],
                      f"{v['name']}_val_acc_delta": v["val_acc_delta"],
                      f"{v['name']}_agreement": v["agreement_with_fp32"]})
    return stats


def copy_web(export: Artifact | Path, dest: str | Path, npm_cache: Path | None = None) -> dict[str, Any]:
    """Copy the web folder of an ``export`` artifact to ``dest`` (created; an existing ``dest`` must be empty
    or hold an earlier copy, i.e. a ``web.json``), with onnxruntime-web under ``dest/ort/`` when ``npm_cache``
    (default :func:`npm_cache_dir`) holds the pinned version. Returns ``{"dir", "files", "runtime", "bundled",
    "npm_cache"}``: ``runtime`` is ``"ort/"`` when copied (``bundled``: the folder works offline), else the CDN URL
    the page falls back to; ``npm_cache`` is the directory looked in."""
    src = export.path if isinstance(export, Artifact) else Path(export)
    if not (src / "web.json").is_file():
        raise FileNotFoundError(f"'export' expected a web folder (web.json) in {src} (got none; an export "
                                "written before the browser app: re-run `strata export`)")
    dest = Path(dest)
    if dest.exists() and (not dest.is_dir() or (any(dest.iterdir()) and not (dest / "web.json").is_file())):
        raise FileExistsError(f"'--web' expected a new or empty directory, or an earlier web export (got {dest})")
    dest.mkdir(parents=True, exist_ok=True)
    files = []
    for path in sorted(src.iterdir()):
        if path.is_file() and path.name != MANIFEST_NAME:
            shutil.copyfile(path, dest / path.name)
            files.append(path.name)
    npm_cache = npm_cache or npm_cache_dir()
    package = ort_web_dir(npm_cache)
    where = ORT_WEB_CDN
    if package is not None:
        (dest / "ort").mkdir(exist_ok=True)
        for name in ORT_WEB_FILES:
            shutil.copyfile(package / "dist" / name, dest / "ort" / name)
        where = "ort/"
    return {"dir": str(dest.resolve()), "files": files, "runtime": where, "bundled": package is not None,
            "npm_cache": str(npm_cache)}
