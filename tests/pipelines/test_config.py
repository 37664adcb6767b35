"""PipelineConfig.load: file, then ``--set`` overrides, then keywords; invalid input gives clear errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from pipelines.config import PipelineConfig, dataset_slug
from pipelines.orchestration.resources import build_resources


@pytest.fixture
def yaml_file(tmp_path: Path) -> Path:
    path = tmp_path / "run.yaml"
    path.write_text(
        "dataset: demo\n"
        "sample:\n"
        "  batch_size: 256\n"
        "  fanouts: [5, 5]\n"
        "train:\n"
        "  epochs: 2\n"
    )
    return path


def test_defaults() -> None:
    cfg = PipelineConfig.load()
    assert cfg.dataset == "tiny"
    assert cfg.sample.fanouts == [10, 10]
    assert cfg.policy == "auto"  # plans each run by predicted epoch time


def test_yaml_file(yaml_file: Path) -> None:
    cfg = PipelineConfig.load(yaml_file)
    assert cfg.dataset == "demo"
    assert cfg.sample.batch_size == 256
    assert cfg.sample.fanouts == [5, 5]
    assert cfg.train.epochs == 2
    assert cfg.sample.epochs == 3  # untouched defaults stay


def test_json_file(tmp_path: Path) -> None:
    path = tmp_path / "run.json"
    path.write_text(json.dumps({"dataset": "tiny", "plan": {"cpu_cache_fraction": 0.25}}))
    assert PipelineConfig.load(path).plan.cpu_cache_fraction == 0.25


def test_overrides_after_file_and_keywords_last(yaml_file: Path) -> None:
    cfg = PipelineConfig.load(
        yaml_file,
        overrides=["sample.batch_size=512", "sample.fanouts=15,10,5", "train.device=cpu", "dataset=tiny"],
        dataset="synthetic:nodes=100,degree=4,dim=8,classes=2,seed=1",
    )
    assert cfg.sample.batch_size == 512
    assert cfg.sample.fanouts == [15, 10, 5]
    assert cfg.train.device == "cpu"
    assert cfg.train.epochs == 2  # from the file
    assert cfg.dataset.startswith("synthetic:")  # the keyword wins over file and --set


def test_override_values_are_typed() -> None:
    cfg = PipelineConfig.load(overrides=["plan.cpu_cache_bytes=1048576", "sample.fanouts=[4, 4]",
                                         "ingest.options.features=/data/x.npy"])
    assert cfg.plan.cpu_cache_bytes == 1048576
    assert cfg.sample.fanouts == [4, 4]
    assert cfg.ingest.options == {"features": "/data/x.npy"}


def test_frozen() -> None:
    cfg = PipelineConfig.load()
    with pytest.raises(ValueError):
        cfg.sample.batch_size = 3  # type: ignore[misc]


@pytest.mark.parametrize(
    ("override", "message"),
    [
        ("sample.batch_size", "'--set' expected key=value (got 'sample.batch_size')"),
        ("sampel.batch_size=3", "'--set sampel.batch_size' expected a key starting with one of"),
        ("sample.batch_sise=3", "batch_sise"),
        ("sample.batch_size=-1", "batch_size"),
        ("reorder.strategy=zigzag", "strategy"),
        ("train.dropout=abc", "dropout"),
    ],
)
def test_invalid_overrides(override: str, message: str) -> None:
    with pytest.raises(ValueError) as info:
        PipelineConfig.load(overrides=[override])
    assert message in str(info.value)


def test_unknown_key_in_file(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text("sample:\n  batchsize: 3\n")
    with pytest.raises(ValueError, match="batchsize"):
        PipelineConfig.load(path)


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError, match="'--config' expected an existing YAML or JSON file"):
        PipelineConfig.load(tmp_path / "nope.yaml")


def test_top_level_must_be_mapping(tmp_path: Path) -> None:
    path = tmp_path / "list.yaml"
    path.write_text("- 1\n- 2\n")
    with pytest.raises(ValueError, match="expected a mapping at the top level"):
        PipelineConfig.load(path)


def test_dataset_slug() -> None:
    assert dataset_slug("tiny") == "tiny"
    slug = dataset_slug("synthetic:nodes=100,degree=4")
    assert slug.startswith("synthetic-") and "/" not in slug and ":" not in slug
    assert dataset_slug("synthetic:nodes=100,degree=4") == slug  # deterministic


def test_resource_builds_the_same_config(yaml_file: Path, tmp_path: Path) -> None:
    loaded = PipelineConfig.load(yaml_file, ["sample.batch_size=64"], dataset="tiny")
    resource = build_resources(root=str(tmp_path / "root"), config=loaded)["strata"]
    cfg = resource.pipeline_config()
    assert cfg == PipelineConfig.load(yaml_file, ["sample.batch_size=64"], dataset="tiny")
    assert cfg.dataset == "tiny" and cfg.sample.batch_size == 64 and cfg.train.epochs == 2


def _params(stage: str, *overrides: str, also: tuple[str, ...] = ()) -> dict:
    from pipelines.config import artifact_params

    return artifact_params(PipelineConfig.load(overrides=list(overrides)), stage, also)


def test_speed_knobs_never_change_an_artifact_version() -> None:
    for stage, knob in (("ingest", "ingest.chunk_edges=7"), ("reorder", "reorder.memory_mb=3"),
                        ("reorder", "reorder.chunk_rows=5"), ("sample", "sample.num_threads=1"),
                        ("pack", "pack.memory_mb=1"), ("train", "train.prefetch=5"), ("train", "train.num_threads=1"),
                        ("train", "train.sequential=true"), ("train", "train.checkpoint_path=/tmp/c.pt")):
        assert _params(stage, knob) == _params(stage), knob
    assert _params("train", "train.lr=0.5") != _params("train")
    assert _params("pack") == {}
    # diskgnn's store budget and MinHash order version only its own pack artifacts
    assert _params("pack", "policy=diskgnn", also=("policy",)) == {
        "disk_budget": 3.0, "minhash_k": 2, "disk_cache_order": "uses", "read_gap_blocks": 0, "policy": "diskgnn"}
    assert set(_params("pack", also=("policy",))) >= {"disk_budget", "minhash_k", "policy"}  # auto: all it may use
    assert "disk_budget" not in _params("pack", "policy=naive", also=("policy",))


def test_method_specific_settings_count_only_for_the_method_that_reads_them() -> None:
    assert "seed" not in _params("reorder", "reorder.strategy=degree")
    degree, random = "reorder.strategy=degree", "reorder.strategy=random"
    assert _params("reorder", degree, "reorder.seed=3") == _params("reorder", degree)
    assert _params("reorder", random, "reorder.seed=3") != _params("reorder", random)
    assert "bloom_bits" not in _params("partition", "partition.method=range")
    assert _params("partition", "partition.method=fennel")["bloom_bits"] == 1 << 20
    assert "grem_chunk_fraction" in _params("partition", "partition.method=grem")
    # the partition strategy reads the whole partition section: its settings enter the reorder version
    by_parts = _params("reorder", "reorder.strategy=partition")
    assert by_parts["partition"]["imbalance"] == 0.05 and by_parts["partition"]["bloom_bits"] == 1 << 20
    assert "partition" not in _params("reorder", "reorder.strategy=community")


def test_policy_enters_the_layout_and_training_versions() -> None:
    for stage in ("plan", "pack", "train"):
        assert _params(stage, "policy=naive", also=("policy",))["policy"] == "naive"


def test_errors_name_the_setting() -> None:
    with pytest.raises(ValueError, match=r"'sample.batch_size' expected > 0 \(got -1\)"):
        PipelineConfig.load(overrides=["sample.batch_size=-1"])
    with pytest.raises(ValueError, match=r"'train.nope' expected a known setting"):
        PipelineConfig.load(overrides=["train.nope=1"])
    with pytest.raises(ValueError, match=r"'policy' expected one of .*diskgnn.* \(got 'ginex-ish'\)"):
        PipelineConfig.load(overrides=["policy=ginex-ish"])


def test_every_trainer_option_is_a_setting() -> None:
    cfg = PipelineConfig.load(overrides=["train.eval_every=2", "train.deterministic=false", "train.sequential=true",
                                         "train.num_layers=2", "train.num_classes=6", "train.resume=/x.pt"])
    assert (cfg.train.eval_every, cfg.train.deterministic, cfg.train.sequential) == (2, False, True)
    assert (cfg.train.num_layers, cfg.train.num_classes, cfg.train.resume) == (2, 6, "/x.pt")


def test_describe_settings_lists_every_field_with_its_default() -> None:
    from pipelines.config import describe_settings

    rows = {r["key"]: r for r in describe_settings(PipelineConfig.load(overrides=["plan.cpu_cache_fraction=0.2"]))}
    assert rows["plan.cpu_cache_fraction"]["value"] == 0.2 and rows["plan.cpu_cache_fraction"]["default"] == 0.1
    assert rows["reorder.seed"]["artifact"] == "selected" and rows["pack.memory_mb"]["artifact"] is False
    assert {"dataset", "policy", "train.model", "train.eval_every", "export.opset"} <= set(rows)
    assert all(r["description"] for r in rows.values())


def test_a_policys_own_knobs_change_only_its_artifacts() -> None:
    from pipelines.config import PipelineConfig, artifact_params

    def plan_params(policy: str, *sets: str) -> dict:
        cfg = PipelineConfig.load(overrides=[f"policy={policy}", *sets], dataset="tiny")
        return artifact_params(cfg, "plan", also=("policy",))

    for knob, owner in (("plan.staleness=7", "outre"), ("plan.hyperbatch_bytes=8192", "hyperbatch"),
                        ("plan.hotset_decay=0.25", "hyperbatch"), ("plan.hotset_refresh_epochs=2", "hyperbatch")):
        assert plan_params(owner, knob) != plan_params(owner)
        assert plan_params("diskgnn", knob) == plan_params("diskgnn")


def test_each_policy_owns_its_settings_and_they_count_only_for_it() -> None:
    """The plan and pack sections are assembled from the built-in policies' own settings (Policy.settings):
    the keys are the same as ever, and a policy's artifact="selected" settings change its artifacts only."""
    from pipelines.config import PackConfig, PlanConfig, artifact_params
    from pipelines.methods.policies import BUILTIN_POLICIES, POLICIES

    owned = {(section, name): cls.name for cls in BUILTIN_POLICIES for section, model in cls.settings.items()
             for name in model.model_fields}
    assert owned[("plan", "superbatch_size")] == "ginex" and owned[("pack", "disk_budget")] == "diskgnn"
    for (section, name), policy in owned.items():
        assert name in {"plan": PlanConfig, "pack": PackConfig}[section].model_fields
        assert name in POLICIES.get(policy).reads or name == "prefetch_partitions"  # speed only
    ginex = PipelineConfig.load(overrides=["policy=ginex", "plan.superbatch_size=4"])
    other = PipelineConfig.load(overrides=["policy=diskgnn", "plan.superbatch_size=4"])
    assert artifact_params(ginex, "plan", ("policy",))["superbatch_size"] == 4
    assert "superbatch_size" not in artifact_params(other, "plan", ("policy",))


def test_a_plugin_policy_cannot_declare_settings_the_sections_lack() -> None:
    from pipelines.core.sections import Section
    from pipelines.methods.policies import POLICIES, Policy, register_policy
    from trainer.config import setting

    class ToySettings(Section):
        toy_knob: int = setting(1, "toy: a knob no section has.", artifact="selected")

    @register_policy
    class Toy(Policy):
        name = "toy-owned-settings"
        settings = {"plan": ToySettings}

        def features(self, inputs):  # pragma: no cover - never opened
            raise NotImplementedError

    try:
        assert "toy_knob" in Toy.reads
        with pytest.raises(ValueError, match="'policy' toy-owned-settings expected its settings in the plan "
                                             "section \\(got toy_knob"):
            PipelineConfig.load(overrides=["policy=toy-owned-settings"])
    finally:
        POLICIES.unregister("toy-owned-settings")
