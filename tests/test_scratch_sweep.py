"""The start-up sweep of dead notebooks' run folders deletes only what this user's lab made: folders in this
user's private folder (0700, its own, not a link), holding the token the lab wrote for them. A folder other
users can plant, or a path a note names, is never deleted."""
from __future__ import annotations

import os
import stat
import tempfile

import pytest

from labcore.live import scratch

DEAD = 999_999_999          # no process has this pid


@pytest.fixture
def tmp(tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    return tmp_path


def _dead_run_dir() -> str:
    run_dir = scratch.make_run_dir()
    dead = run_dir.replace(f"run-{os.getpid()}-", f"run-{DEAD}-")
    os.rename(run_dir, dead)
    with open(os.path.join(dead, scratch.TOKEN), "w") as f:
        f.write(scratch._token(dead))
    return dead


def test_run_folders_live_in_a_private_folder_of_this_users(tmp):
    run_dir = scratch.make_run_dir()
    folder = os.path.dirname(run_dir)
    info = os.lstat(folder)
    assert folder == str(tmp / f"labcore-{os.getuid()}") and stat.S_IMODE(info.st_mode) == 0o700
    assert info.st_uid == os.getuid() and os.path.isfile(os.path.join(run_dir, scratch.TOKEN))
    scratch.remove(run_dir)
    assert not os.path.exists(folder)                        # nothing left once the last run folder goes


def test_a_dead_owners_folder_with_the_labs_token_is_swept(tmp):
    dead = _dead_run_dir()
    assert scratch.remove_orphans() == [dead] and not os.path.exists(dead)


def test_what_a_note_names_is_never_deleted(tmp):
    victim = tmp / "precious"
    victim.mkdir()
    (victim / "data").write_text("keep me")
    old_style = tmp / f"labcore-{DEAD}-abc"                # the sweep once trusted a note in such a folder
    old_style.mkdir()
    (old_style / "pymp-dir").write_text(str(victim))
    planted = os.path.join(scratch.private_folder(), f"run-{DEAD}-planted")
    os.mkdir(planted)
    with open(os.path.join(planted, "pymp-dir"), "w") as f:
        f.write(str(victim))
    scratch.remove_orphans()
    assert (victim / "data").read_text() == "keep me" and old_style.is_dir() and os.path.isdir(planted)


@pytest.mark.parametrize("forgery", ["token of another folder", "token as a link", "folder as a link"])
def test_a_folder_without_its_own_token_is_left_alone(tmp, forgery):
    folder = scratch.private_folder()
    target = tmp / "elsewhere"
    target.mkdir()
    run_dir = os.path.join(folder, f"run-{DEAD}-forged")
    if forgery == "folder as a link":
        os.symlink(target, run_dir)
        (target / scratch.TOKEN).write_text(scratch._token(run_dir))
    else:
        os.mkdir(run_dir)
        token = os.path.join(run_dir, scratch.TOKEN)
        if forgery == "token as a link":
            (target / "t").write_text(scratch._token(run_dir))
            os.symlink(target / "t", token)
        else:
            with open(token, "w") as f:
                f.write(scratch._token(os.path.join(folder, "run-1-other")))
    assert scratch.remove_orphans() == []
    assert os.path.lexists(run_dir) and target.is_dir()


@pytest.mark.parametrize("planted", ["a link", "open to others", "another user's"])
def test_a_private_folder_someone_else_could_plant_is_refused_and_nothing_swept(tmp, planted):
    folder = tmp / f"labcore-{os.getuid()}"
    decoy = tmp / "decoy"
    decoy.mkdir()
    (decoy / f"run-{DEAD}-x").mkdir()
    if planted == "a link":
        folder.symlink_to(decoy, target_is_directory=True)
    elif planted == "open to others":
        folder.mkdir(mode=0o777)
        folder.chmod(0o777)
    else:
        if os.geteuid() != 0:
            pytest.skip("needs root to give a folder to another user")
        folder.mkdir(mode=0o700)
        os.chown(folder, 12345, 12345)
    with pytest.raises(ValueError, match="not a private folder of this user's"):
        scratch.make_run_dir()
    assert scratch.remove_orphans() == [] and (decoy / f"run-{DEAD}-x").is_dir()
