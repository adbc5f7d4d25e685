"""study-pack / study-unpack on made-up study folders: what travels, what is left out and why,
and every refusal before anything is written (the recipe's own round trip: test_table1)."""

import fcntl
import json
import os
import shutil
import tarfile

from fairseq_attn_recipes.study_carry import MANIFEST, UNPACK_MARK
from test_recipes import steps


def write(path, data):
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "wb") as f:
        f.write(data if isinstance(data, bytes) else data.encode())


def tree(folder):
    """Every file below ``folder`` (relative path -> bytes)."""
    out = {}
    for top, _, files in os.walk(folder):
        for name in files:
            path = os.path.join(top, name)
            with open(path, "rb") as f:
                out[os.path.relpath(path, folder)] = f.read()
    return out


def make_study(study):
    write(study / "settings.txt", "DATA=/somewhere\nCONVERGE=4\n")
    write(study / "table1.md", "a table the study renders again\n")
    for run in ("baseline_seed1", "csan1d_seed1"):
        d = study / "runs" / run
        write(d / "run.json", json.dumps({"arch": run}))
        write(d / "data.json", "{}")
        write(d / "train.log", f"log of {run}\n")
        write(d / "test" / "scores.json", "{}")
        write(d / "test" / "hyp.txt", f"hyps of {run}\n")
        write(d / "checkpoint_last.pt", b"\0" * 64)
        write(d / "checkpoint.avg2.pt", b"\0" * 64)
        write(d / "tensorboard" / "train" / "events.out", b"tb")
        write(d / ".study.lock", "")
        write(d / ".train.lock", "")
        write(d / "test.tmp" / "hyp.txt", "half written\n")
    # still training (no evaluation yet) and one a process holds: both left out
    write(study / "runs" / "rel_pos_seed1" / "run.json", "{}")
    write(study / "runs" / "rel_pos_seed1" / "train.log", "training\n")
    held = study / "runs" / "neighbor_seed1"
    write(held / "run.json", "{}")
    write(held / "test" / "scores.json", "{}")
    write(held / ".study.lock", "")
    return held


def test_pack_carries_finished_runs_without_checkpoints_and_unpack_keeps_what_is_there(tmp_path):
    study = tmp_path / "work" / "table1_converge4"
    held = make_study(study)
    archive = tmp_path / "carried.tar.xz"
    with open(held / ".study.lock") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        p = steps("study-pack", str(study), "--to", str(archive))
    assert p.returncode == 0, p.stderr
    assert "2 finished runs" in p.stdout
    assert "left out: runs/neighbor_seed1: a process holds it (training or evaluating)" in p.stdout
    assert "left out: runs/rel_pos_seed1: not evaluated yet (no scores.json)" in p.stdout
    with tarfile.open(archive) as tar:
        names = sorted(tar.getnames())
    want = sorted([MANIFEST, "settings.txt"] + [f"runs/{r}/{f}" for r in ("baseline_seed1", "csan1d_seed1")
                                                for f in ("data.json", "run.json", "test/hyp.txt", "test/scores.json",
                                                          "train.log")])
    assert names == want  # no checkpoint, TensorBoard, lock, half-written folder or rendered table

    # into a new machine's folder: the runs and the settings, byte for byte
    other = tmp_path / "other" / "table1_converge4"
    p = steps("study-unpack", str(archive), "--to", str(other))
    assert p.returncode == 0 and "2 runs unpacked" in p.stdout, p.stderr
    got, src = tree(other), tree(study)
    assert sorted(got) == sorted(n for n in want if n != MANIFEST)
    assert all(got[n] == src[n] for n in got)

    # again, over a folder that holds one run already (changed there): that run is kept as it is
    (other / "runs" / "csan1d_seed1" / "train.log").write_text("trained on, here\n")
    shutil.rmtree(other / "runs" / "baseline_seed1")
    p = steps("study-unpack", str(archive), "--to", str(other))
    assert p.returncode == 0 and "1 runs unpacked" in p.stdout, p.stderr
    assert "kept: runs/csan1d_seed1" in p.stdout
    assert (other / "runs" / "csan1d_seed1" / "train.log").read_text() == "trained on, here\n"
    assert (other / "runs" / "baseline_seed1" / "train.log").read_bytes() == src["runs/baseline_seed1/train.log"]
    assert not [n for n in os.listdir(other / "runs") if n.endswith(".tmp")]

    # a killed unpack's run written aside (it holds the unpack's mark) is named, and removed with --yes alone; a
    # folder of the same form without the mark is not ours: left as it is
    killed, mine = other / "runs" / ".baseline_seed1.k1ll.tmp", other / "runs" / ".baseline_seed1.mine.tmp"
    write(killed / UNPACK_MARK, str(archive))
    write(killed / "train.log", "half written\n")
    write(mine / "notes.txt", "my own\n")
    shutil.rmtree(other / "runs" / "baseline_seed1")
    p = steps("study-unpack", str(archive), "--to", str(other))
    assert p.returncode == 0 and "1 runs unpacked" in p.stdout, p.stderr
    assert f"left: {killed}: a run half written by a killed study-unpack (give --yes to remove it)" in p.stdout
    assert (killed / "train.log").read_text() == "half written\n"
    p = steps("study-unpack", str(archive), "--to", str(other), "--yes")
    assert p.returncode == 0 and "0 runs unpacked" in p.stdout, p.stderr
    assert f"removed: {killed}: a run half written by a killed study-unpack" in p.stdout
    assert not killed.exists() and (mine / "notes.txt").read_text() == "my own\n"
    assert not (other / "runs" / "baseline_seed1" / UNPACK_MARK).exists()  # the mark is not left in the run
    assert tree(other / "runs" / "baseline_seed1") == {n[len("runs/baseline_seed1/"):]: b for n, b in src.items()
                                                      if n in want and n.startswith("runs/baseline_seed1/")}


def test_refusals_write_nothing(tmp_path):
    study = tmp_path / "study"
    make_study(study)
    archive = tmp_path / "carried.tar.xz"
    # not a study folder; not .tar.xz; an archive there already without --yes
    p = steps("study-pack", str(study / "runs"), "--to", str(archive))
    assert p.returncode == 1 and "not a study folder" in p.stderr and not archive.exists()
    p = steps("study-pack", str(study), "--to", str(tmp_path / "carried.tar"))
    assert p.returncode == 1 and "ending in .tar.xz" in p.stderr
    assert steps("study-pack", str(study), "--to", str(archive)).returncode == 0
    first = archive.read_bytes()
    (study / "runs" / "baseline_seed1" / "train.log").write_text("changed\n")
    p = steps("study-pack", str(study), "--to", str(archive))
    assert p.returncode == 1 and "give --yes" in p.stderr and archive.read_bytes() == first
    assert steps("study-pack", str(study), "--to", str(archive), "--yes").returncode == 0
    assert archive.read_bytes() != first

    # other settings in the target folder: refused, nothing written
    other = tmp_path / "other"
    write(other / "settings.txt", "DATA=/elsewhere\n")
    p = steps("study-unpack", str(archive), "--to", str(other))
    assert p.returncode == 1 and "holds other settings" in p.stderr and sorted(tree(other)) == ["settings.txt"]

    # a member changed after packing: refused whole
    with tarfile.open(archive) as tar:
        members = {i.name: tar.extractfile(i).read() for i in tar.getmembers()}
    members["runs/baseline_seed1/test/hyp.txt"] = b"edited by hand\n"
    from fairseq_attn_reports.study_bundle import tar_xz
    tampered = tmp_path / "tampered.tar.xz"
    tampered.write_bytes(tar_xz(members))
    fresh = tmp_path / "fresh"
    p = steps("study-unpack", str(tampered), "--to", str(fresh))
    assert p.returncode == 1 and "runs/baseline_seed1/test/hyp.txt differs from the sha256" in p.stderr
    assert not fresh.exists()
    # a member the manifest does not name, and an archive that is not one
    members = dict(members, **{"runs/baseline_seed1/test/hyp.txt": tree(study)["runs/baseline_seed1/test/hyp.txt"],
                               "runs/extra.txt": b"x"})
    tampered.write_bytes(tar_xz(members))
    p = steps("study-unpack", str(tampered), "--to", str(fresh))
    assert p.returncode == 1 and "runs/extra.txt is in the archive, not in its carry.json" in p.stderr
    tampered.write_bytes(b"not an archive")
    p = steps("study-unpack", str(tampered), "--to", str(fresh))
    assert p.returncode == 1 and "not a readable .tar.xz" in p.stderr and not fresh.exists()
