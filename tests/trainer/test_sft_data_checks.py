"""SFT data settings that would go unread, or validation rows that are trained on, are refused when the config is
read, naming the field, where it was set and the fix."""

from __future__ import annotations

import pytest

from prime_rl.config.loader import ConfigError, parse_config
from prime_rl.config.trainer import SFTConfig


def _refusal(args: list[str]) -> str:
    with pytest.raises(ConfigError) as refused:
        parse_config(SFTConfig, args)
    return str(refused.value)


def test_split_and_subset_a_local_file_does_not_read_are_refused(tmp_path):
    msg = _refusal(["--data.path", "rows.jsonl", "--data.split", "test"])
    assert '`split = "test"` (from --data.split) is not read: path = "rows.jsonl" is one file, read whole' in msg
    assert "remove split" in msg
    msg = _refusal(["--data.path", "rows.jsonl", "--data.subset", "foo"])
    assert '`subset = "foo"` (from --data.subset) is read only with a dataset `name`' in msg
    assert "remove subset (a file holds one dataset)" in msg
    # a folder reads split (save_to_disk's DatasetDict, a folder of data files) but not subset
    assert parse_config(SFTConfig, ["--data.path", "rows_dir", "--data.split", "test"]).data.split == "test"
    msg = _refusal(["--data.path", "rows_dir", "--data.subset", "foo"])
    assert 'give the dataset folder as name = "rows_dir" instead of path' in msg
    # a dataset name reads both
    cfg = parse_config(SFTConfig, ["--data.name", "org/ds", "--data.split", "test", "--data.subset", "foo"])
    assert (cfg.data.split, cfg.data.subset) == ("test", "foo")
    assert parse_config(SFTConfig, ["--data.path", "rows.jsonl", "--data.split", "train"]).data.path is not None


def test_unread_fields_of_a_source_of_val_data_and_of_data_next_to_sources_are_refused(tmp_path):
    conf = tmp_path / "mix.toml"
    conf.write_text('[[data.source]]\npath = "a.jsonl"\n\n[[data.source]]\npath = "b.parquet"\nsplit = "test"\n')
    msg = _refusal(["@", str(conf)])
    assert f'data.source[1]: `split = "test"` (in {conf}) is not read: path = "b.parquet" is one file' in msg
    conf.write_text('[data]\nsubset = "x"\n\n[[data.source]]\npath = "a.jsonl"\n')
    msg = _refusal(["@", str(conf)])
    assert f'`subset = "x"` (in {conf}) under [data] is not read with [[data.source]]' in msg
    assert "--data.subset None" in msg
    assert parse_config(SFTConfig, ["@", str(conf), "--data.subset", "None"]).data.subset is None
    conf.write_text('[val]\ninterval = 10\n[val.data]\npath = "val.jsonl"\nsubset = "x"\n')
    msg = _refusal(["@", str(conf)])
    assert f'val.data: `subset = "x"` (in {conf}) is read only with a dataset `name`' in msg


def test_val_data_that_is_the_training_data_is_refused_naming_both_fields(tmp_path):
    conf = tmp_path / "val.toml"
    conf.write_text('[data]\npath = "rows.jsonl"\n\n[val]\ninterval = 10\n\n[val.data]\npath = "./rows.jsonl"\n')
    msg = _refusal(["@", str(conf)])
    assert (f'`val.data.path = "rows.jsonl"` (in {conf}) is `data.path = "rows.jsonl"` (in {conf}): the validation '
            "rows are the training rows") in msg
    assert "--val.data None --val.fraction 0.05" in msg
    assert parse_config(SFTConfig, ["@", str(conf), "--val.data.path", "val.jsonl"]).val.data is not None
    # a dataset name: same split (val.data.split defaults to "train") is refused, another split is not
    args = ["--data.name", "org/ds", "--val.interval", "5", "--val.data.name", "org/ds"]
    msg = _refusal(args)
    assert ('`val.data.name = "org/ds"` (from --val.data.name) with `val.data.split = "train"` is `data.name = '
            '"org/ds"` (from --data.name) with `data.split = "train"`') in msg
    assert parse_config(SFTConfig, [*args, "--val.data.split", "test"]).val.data.split == "test"
    # one of several [[data.source]]
    conf.write_text('[[data.source]]\npath = "a.jsonl"\n\n[[data.source]]\npath = "b.jsonl"\n\n'
                    '[val]\ninterval = 10\n\n[val.data]\npath = "b.jsonl"\n')
    assert f'is `data.source.1.path = "b.jsonl"` (in {conf})' in _refusal(["@", str(conf)])


def test_num_batches_above_the_validation_split_is_warned_about_at_dry_run(tmp_path):
    """reverse-text's 465 rows with val.fraction = 0.05 hold out 23: num_batches = 4 of 16 asks for 64."""
    import json

    from prime_rl.config.sft import SFTValConfig
    from prime_rl.launcher.sft_preflight import val_split_warnings

    warning = SFTValConfig(fraction=0.05, num_batches=4).short_split_warning(23, 16, 465)
    assert warning == ("val.num_batches = 4 asks for 4 batches of 16 conversations (data.batch_size), 64 in all, but "
                       "the validation split holds 23 (val.fraction = 0.05 of 465 training rows): each validation "
                       "reads those 23 (2 batches), fewer than asked; lower val.num_batches to 2, or leave it unset "
                       "(the whole split)")  # fmt: skip
    assert SFTValConfig(fraction=0.05, num_batches=2).short_split_warning(23, 16, 465) is None
    assert SFTValConfig(fraction=0.05).short_split_warning(23, 16, 465) is None
    assert "8 conversations (val.batch_size)" in SFTValConfig(fraction=0.05, num_batches=4, batch_size=8
                                                             ).short_split_warning(23, 16, 465)
    where = {"val.num_batches": " (from --val.num-batches)", "val.fraction": " (in a.toml)"}.get
    assert SFTValConfig(fraction=0.05, num_batches=4).short_split_warning(23, 16, 465, where).startswith(
        "val.num_batches = 4 (from --val.num-batches) asks for")
    assert "holds 23 (val.fraction = 0.05 (in a.toml) of 465 training rows)" in SFTValConfig(
        fraction=0.05, num_batches=4).short_split_warning(23, 16, 465, where)
    rows = tmp_path / "rows.jsonl"
    rows.write_text("".join(json.dumps({"messages": [{"role": "user", "content": str(i)}]}) + "\n" for i in range(465)))
    conf = tmp_path / "val.toml"
    conf.write_text(f'[data]\npath = "{rows}"\nbatch_size = 16\n\n[val]\nfraction = 0.05\nnum_batches = 4\n')
    (line,) = val_split_warnings(parse_config(SFTConfig, ["@", str(conf)]))
    assert line.startswith(f"val.num_batches = 4 (in {conf}) asks for 4 batches of 16 conversations")
    assert f"holds 23 (val.fraction = 0.05 (in {conf}) of 465 training rows)" in line
    assert val_split_warnings(parse_config(SFTConfig, ["@", str(conf), "--val.num-batches", "1"])) == []
    val_rows = tmp_path / "val.jsonl"
    val_rows.write_text("".join(rows.read_text().splitlines(keepends=True)[:5]))
    held = parse_config(SFTConfig, ["@", str(conf), "--val.fraction", "None", "--val.data.path", str(val_rows)])
    (line,) = val_split_warnings(held)
    assert "the validation split holds 5 (val.data)" in line and "(1 batch)" in line


def test_num_batches_above_the_validation_split_is_warned_about_when_sft_starts(tmp_path, monkeypatch):
    """The real run's start (`trainer.sft.train`) logs the same warning as the dry run, from the rows it loaded: the
    field and where it was set, the numbers, the fix; with rows that fill num_batches, no warning. The run is stopped
    at the tokenizer (no model is loaded)."""
    import json

    from prime_rl.launcher.sft_preflight import val_split_warnings
    from prime_rl.trainer import model, sft

    class Stop(Exception):
        pass

    def stop(*args, **kwargs):
        raise Stop

    monkeypatch.setattr(model, "model_dir", lambda name: None)
    monkeypatch.setattr(sft, "load_tokenizer", stop)
    rows = tmp_path / "rows.jsonl"
    rows.write_text("".join(json.dumps({"messages": [{"role": "user", "content": str(i)},
                                                     {"role": "assistant", "content": "ok"}]}) + "\n"
                            for i in range(465)))  # fmt: skip
    conf = tmp_path / "val.toml"
    conf.write_text(f'output_dir = "{tmp_path / "run"}"\n\n[data]\npath = "{rows}"\nbatch_size = 16\n\n'
                    '[val]\nfraction = 0.05\nnum_batches = 4\n')

    def start_log(args: list[str]) -> str:
        cfg = parse_config(SFTConfig, ["@", str(conf), *args])
        log = cfg.output_dir / "logs" / "sft.log"
        log.unlink(missing_ok=True)
        with pytest.raises(Stop):
            sft.train(cfg)
        return log.read_text()

    text = start_log([])
    (line,) = [line for line in text.splitlines() if "val.num_batches" in line]
    assert "WARNING" in line
    assert line.split("] ", 1)[1] == (
        f"val.num_batches = 4 (in {conf}) asks for 4 batches of 16 conversations (data.batch_size), 64 in all, but the "
        f"validation split holds 23 (val.fraction = 0.05 (in {conf}) of 465 training rows): each validation reads "
        "those 23 (2 batches), fewer than asked; lower val.num_batches to 2, or leave it unset (the whole split)")
    assert val_split_warnings(parse_config(SFTConfig, ["@", str(conf)])) == [line.split("] ", 1)[1]]  # one message
    assert "val.num_batches" not in start_log(["--val.num-batches", "2"])
    val_rows = tmp_path / "val.jsonl"
    val_rows.write_text("".join(rows.read_text().splitlines(keepends=True)[:5]))
    text = start_log(["--val.fraction", "None", "--val.data.path", str(val_rows)])
    assert "the validation split holds 5 (val.data): each validation reads those 5 (1 batch)" in text
