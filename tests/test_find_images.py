"""/ingest's targets: a file, a folder, a glob — and a file whose name looks like a glob."""

from nexus.ingest import find_images


def test_an_existing_file_with_brackets_in_its_name_is_itself(tmp_path):
    odd = tmp_path / "photo[1].png"
    odd.write_bytes(b"x")
    marked = tmp_path / "[bold]x[@click=app.quit]q.png"
    marked.write_bytes(b"x")
    assert find_images(str(odd)) == [odd]  # read as a glob, it found nothing (a trial)
    assert find_images(str(marked)) == [marked]


def test_folders_and_globs_still_expand(tmp_path):
    for name in ("a.png", "b.jpg", "notes.txt"):
        (tmp_path / name).write_bytes(b"x")
    assert [p.name for p in find_images(str(tmp_path))] == ["a.png", "b.jpg"]
    assert [p.name for p in find_images(str(tmp_path / "*.png"))] == ["a.png"]
    assert find_images(str(tmp_path / "missing.png")) == [tmp_path / "missing.png"]  # said later: no such file
