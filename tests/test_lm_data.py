"""Corpus sources, the deterministic split, the token cache and evaluation sequences."""

import numpy as np
import pytest

import lengen.data.corpus as corpus_mod
from lengen.data import long_sequences, load_corpus, resolve_source, stdlib_root
from lengen.data.corpus import name_fraction
from lengen.errors import LengenError


pytestmark = pytest.mark.usefixtures("private_cache")


def make_folder(root, n=40):
    root.mkdir()
    for i in range(n):
        (root / f"doc{i:02d}.txt").write_text(f"document {i}\n" * (i + 1))
    return root


def test_stdlib_is_the_offline_default():
    src = resolve_source(None)
    names = {src.name(f) for f in src.files}
    assert src.root == stdlib_root() and "os.py" in names and "json/decoder.py" in names
    assert not any(part in ("site-packages", "test", "__pycache__") for n in names for part in n.split("/"))


def test_split_is_deterministic_and_by_name(tmp_path):
    folder = make_folder(tmp_path / "c")
    a = load_corpus(str(folder), val_fraction=0.25)
    b = load_corpus(str(folder), val_fraction=0.25, use_cache=False)
    assert [d.tobytes() for d in a.val_docs] == [d.tobytes() for d in b.val_docs]
    val_names = sorted(f"doc{i:02d}.txt" for i in range(40) if name_fraction(f"doc{i:02d}.txt") < 0.25)
    assert 0 < len(val_names) < 40 and len(a.val_docs) == len(val_names)
    assert a.val_docs[0].tobytes() == np.frombuffer((folder / val_names[0]).read_bytes(), np.uint8).astype(np.uint16).tobytes()
    # a new file does not move the existing ones between the sides
    (folder / "zz_new.txt").write_text("new\n")
    c = load_corpus(str(folder), val_fraction=0.25)
    assert {d.tobytes() for d in a.val_docs} <= {d.tobytes() for d in c.val_docs}
    assert a.stream("train")[-1] == a.eos and len(a.stream("val")) == sum(len(d) + 1 for d in a.val_docs)


def test_cache_is_reused_and_invalidated(tmp_path, monkeypatch):
    folder = make_folder(tmp_path / "c", n=5)
    first = load_corpus(str(folder))
    assert not first.from_cache and list((tmp_path / "cache").glob("corpus-*.npz"))

    def no_tokenising(*a, **k):
        raise AssertionError("re-tokenised a cached corpus")

    with monkeypatch.context() as m:
        m.setattr(corpus_mod, "_tokenise", no_tokenising)
        second = load_corpus(str(folder))
    assert second.from_cache
    assert [d.tobytes() for d in second.train_docs] == [d.tobytes() for d in first.train_docs]
    (folder / "doc00.txt").write_text("changed, and longer than before\n")
    assert not load_corpus(str(folder)).from_cache


def test_one_document_is_split_by_position(tmp_path):
    f = tmp_path / "one.txt"
    f.write_bytes(bytes(range(1, 101)))
    c = load_corpus(str(f), val_fraction=0.1)
    assert c.train_docs[0].tolist() == list(range(1, 91)) and c.val_docs[0].tolist() == list(range(91, 101))
    (tmp_path / "binary.bin").write_bytes(b"\0\1\2")  # files with NUL bytes are skipped as binary
    assert len(load_corpus(str(tmp_path / "*.*"), val_fraction=0.1).val_docs) == 1


def test_bad_sources(tmp_path):
    with pytest.raises(LengenError, match="matches no files"):
        load_corpus(str(tmp_path / "*.nothing"))
    with pytest.raises(LengenError, match="does not exist"):
        load_corpus(str(tmp_path / "missing.txt"))
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "a.txt").write_text("")
    with pytest.raises(LengenError, match="empty"):
        load_corpus(str(tmp_path / "empty"))
    with pytest.raises(LengenError, match="no files"):
        (tmp_path / "void").mkdir()
        load_corpus(str(tmp_path / "void"))


def test_glob_corpus(tmp_path):
    folder = make_folder(tmp_path / "c", n=6)
    (folder / "skip.md").write_text("not matched\n")
    c = load_corpus(str(folder / "*.txt"))
    assert len(c.train_docs) + len(c.val_docs) == 6


def test_long_sequences_prefers_whole_documents_then_joins():
    docs = [np.arange(10), np.arange(3), np.arange(12), np.arange(4), np.arange(5)]
    out = long_sequences(docs, 8, 4, eos=256)
    assert all(len(s) == 8 for s in out) and len(out) == 3
    assert out[0].tolist() == list(range(8)) and out[1].tolist() == list(range(8))
    assert out[2].tolist() == [0, 1, 2, 256, 0, 1, 2, 3]  # the short documents, joined by EOS
