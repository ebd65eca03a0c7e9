"""The uids a root grader gives its submissions: no two live submissions share one, however many
a grader has seen and however many graders run at once (a shared uid would let one submission's
processes read another's scratch and signal its workers wherever Landlock is missing)."""

import os

from grader.sandbox import identity


def test_a_grader_never_gives_two_submissions_one_uid_however_many_it_grades(tmp_path):
    folder = tmp_path / "uids"
    users = identity.Users(str(folder))
    try:
        uids = [users.claim() for _ in range(2100)]  # the 1025th once shared the first's uid
        assert len(set(uids)) == len(uids)
        assert all(uid >= identity.FIRST_UID for uid in uids)
    finally:
        users.close()
    assert os.listdir(folder) == []  # each uid given back with its file


def test_graders_at_once_never_share_a_uid_and_one_ended_gives_its_uids_back(tmp_path):
    folder = str(tmp_path / "uids")
    first, second = identity.Users(folder), identity.Users(folder)  # one pid: the same first candidates
    try:
        taken = {first.claim() for _ in range(50)}
        assert not taken & {second.claim() for _ in range(50)}
        first.close()
        third = identity.Users(folder)
        try:
            assert {third.claim() for _ in range(50)} == taken  # free again once the first let go
        finally:
            third.close()
    finally:
        first.close()
        second.close()


def test_a_lock_folder_planted_by_anyone_else_is_not_used(tmp_path):
    target = tmp_path / "elsewhere"
    target.mkdir()
    planted = tmp_path / "uids"
    planted.symlink_to(target)
    users = identity.Users(str(planted))
    try:
        users.claim()
        assert users.folder != str(planted) and os.listdir(target) == []
    finally:
        users.close()
    assert not os.path.exists(users.folder)
    open_folder = tmp_path / "open"
    open_folder.mkdir(mode=0o777)
    os.chmod(open_folder, 0o777)  # anyone could remove a lock file there and take its uid
    users = identity.Users(str(open_folder))
    users.close()
    assert users.folder != str(open_folder) and not os.path.exists(users.folder)  # its own, and removed
