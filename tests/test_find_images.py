"""/ingest's targets: a file, a folder, a glob — and a file whose name looks like a glob."""

from pathlib import Path

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


def test_environment_variables_are_expanded_as_a_shell_would(tmp_path, monkeypatch):
    """"/ingest $HOME/imgs/red.png" was "Skipped $HOME/imgs/red.png: no such file" (a trial)."""
    (tmp_path / "imgs").mkdir()
    red = tmp_path / "imgs" / "red.png"
    red.write_bytes(b"x")
    monkeypatch.setenv("PICS", str(tmp_path))
    assert find_images("$PICS/imgs/red.png") == [red]
    assert find_images("${PICS}/imgs/*.png") == [red]
    assert find_images("$PICS/imgs") == [red]
    dollar = tmp_path / "$PICS"  # a name that holds a "$" and exists is itself
    dollar.write_bytes(b"x")
    monkeypatch.chdir(tmp_path)
    assert find_images("$PICS") == [Path("$PICS")]


def test_two_stars_reach_any_depth(tmp_path):
    """"~/**/*.png" found only the pictures one folder down (a trial)."""
    deep = tmp_path / "a" / "b"
    deep.mkdir(parents=True)
    for p in (tmp_path / "top.png", tmp_path / "a" / "mid.png", deep / "low.png"):
        p.write_bytes(b"x")
    assert [p.name for p in find_images(str(tmp_path / "**" / "*.png"))] == ["low.png", "mid.png", "top.png"]


def test_a_glob_takes_the_images_it_matches_as_a_folder_does(tmp_path):
    """"~/Downloads/*" said "Skipped …: not an image" for each document beside the
    pictures; a folder's documents are passed over in silence."""
    for name in ("a.png", "b.JPG", "notes.txt", "report.pdf"):
        (tmp_path / name).write_bytes(b"x")
    assert [p.name for p in find_images(str(tmp_path / "*"))] == ["a.png", "b.JPG"]
    assert find_images(str(tmp_path / "*.pdf")) == []  # "No images found at …"
