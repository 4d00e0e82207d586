"""inference/model/versions.py: which folders under --model_dir are model versions, and
which one is the newest."""
import os


def test_folders_that_are_not_versions_are_ignored_with_a_warning(tmp_path, caplog):
    from inference.model import versions
    from preprocessing.contract.schema import RAW_SCHEMA_ASSET
    for name in ("7", "12", "\u00b2", "tmp"):
        for rel in ("saved_model.pb", "variables/variables.index", RAW_SCHEMA_ASSET):
            (tmp_path / name / rel).parent.mkdir(parents=True, exist_ok=True)
            (tmp_path / name / rel).write_text("x")
    with caplog.at_level("WARNING"):
        found = versions.list_versions(str(tmp_path))
    assert [os.path.basename(v) for v in found] == ["7", "12"]
    assert "\u00b2" in caplog.text and "digits" in caplog.text


def test_a_symlinked_newest_version_is_followed_and_a_dangling_one_reported(tmp_path, caplog):
    from inference.model import versions
    from preprocessing.contract.schema import RAW_SCHEMA_ASSET
    for name in ("base/3", "elsewhere/v9"):
        for rel in ("saved_model.pb", "variables/variables.index", RAW_SCHEMA_ASSET):
            (tmp_path / name / rel).parent.mkdir(parents=True, exist_ok=True)
            (tmp_path / name / rel).write_text("x")
    os.symlink(tmp_path / "elsewhere" / "v9", tmp_path / "base" / "9")
    os.symlink(tmp_path / "gone", tmp_path / "base" / "12")
    with caplog.at_level("WARNING"):
        newest = versions.resolve_model_dir(str(tmp_path / "base"))
    assert newest == str(tmp_path / "base" / "9")
    assert "base/12" in caplog.text and "does not exist" in caplog.text
