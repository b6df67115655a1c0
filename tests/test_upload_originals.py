"""An upload's original never outlives its document (issue 25): whatever the order of PUT, DELETE, a job's run and a
retry, once a document is deleted none of its versions' bytes remain (SQLite home: INDEX/files/; PostgreSQL: rows
of `originals`), and a failed replacement's bytes go once a newer version is submitted and settled. Another
document's bytes are never touched.

Driven through citerag.app.uploads (what the API's routes call) with the real thread queue, its worker loop run
in the test's own thread (`drain`), so that each order is exact; on both backends."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from citerag.app import uploads
from citerag.app.collection import Collection
from citerag.app.home import Citerag
from citerag.jobs.thread import ThreadQueue
from citerag.settings import Settings
from fakes import HashEncoder

A = b"# Notes\n\nThe ferry leaves from pier seven at noon.\n"
B = b"# Notes\n\nThe ferry now leaves from pier nine.\n"
C = b"# Notes\n\nThe ferry is cancelled this winter.\n"
TOO_BIG = b"# Notes\n\n" + b"The ferry is late again. " * 80  # over max_file_mb: its job fails
KEEP = b"# Keep\n\nA bystander whose bytes must stay.\n"
LIMIT_MB = 1500 / 1024 / 1024  # A, B, C and KEEP fit; TOO_BIG does not


class Home:
    """One collection, its queue (not started: `drain` runs what waits), and where its originals lie."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        self.others: list[Citerag] = []
        self.app = self._open()
        self.collection = self.app.collection()
        self.queue = self.queue_for(self.app)

    def _open(self) -> Citerag:
        app = Citerag()
        app.register_encoder(HashEncoder())
        app.open_collection(self.settings, create=True)
        return app

    @staticmethod
    def queue_for(app: Citerag) -> ThreadQueue:
        return ThreadQueue(lambda job: uploads.index_upload(app, job))

    def another_process(self) -> Collection:
        """The same collection opened by another Citerag (an API process that did not take the PUT)."""
        other = self._open()
        self.others.append(other)
        return other.collection()

    def drain(self) -> None:
        self.queue._queue.put(None)
        self.queue._run()

    def stored(self) -> set[str]:
        """The SHA-256 of every original the collection's store holds."""
        if self.settings.store_scheme == "sqlite":
            folder = self.settings.sqlite_dir / "files"
            return {p.name for p in folder.iterdir()} if folder.is_dir() else set()
        import psycopg

        with psycopg.connect(self.settings.store_url) as conn:
            return {r[0] for r in conn.execute("SELECT sha256 FROM originals").fetchall()}

    def close(self) -> None:
        for app in [*self.others, self.app]:
            app.close()


@pytest.fixture(params=["sqlite", "postgres"])
def home(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Home]:
    extra = {"store_url": request.getfixturevalue("pg_url")} if request.param == "postgres" else {}
    made = Home(Settings(index_dir=tmp_path / "home", embedding_model="hash-64", max_file_mb=LIMIT_MB, **extra))
    try:
        yield made
    finally:
        made.close()


def _indexed(home: Home, name: str, data: bytes) -> int:
    doc = uploads.upload(home.collection, home.queue, name, data).document
    home.drain()
    found = home.collection.document(doc.id)
    assert found is not None and found.status == "indexed", found
    return doc.id


def _sha(data: bytes) -> str:
    import hashlib

    return hashlib.sha256(data).hexdigest()


def _put(home: Home, doc_id: int, data: bytes) -> None:
    doc = home.collection.document(doc_id)
    assert doc is not None
    uploads.replace(home.collection, home.queue, doc, data)


def _delete(home: Home, doc_id: int, collection: Collection | None = None) -> None:
    target = collection or home.collection
    doc = target.document(doc_id)
    assert doc is not None
    uploads.delete(target, home.queue, doc)


def _retry(home: Home, doc_id: int) -> None:
    doc = home.collection.document(doc_id)
    assert doc is not None
    uploads.retry(home.collection, home.queue, doc)


Order = Callable[[Home, int], None]


def put_then_delete_before_the_job_ran(home: Home, doc: int) -> None:
    _put(home, doc, B)
    _delete(home, doc)
    home.drain()


def put_then_delete_after_the_job_ran(home: Home, doc: int) -> None:
    _put(home, doc, B)
    home.drain()
    _delete(home, doc)


def put_failed_then_delete(home: Home, doc: int) -> None:
    _put(home, doc, TOO_BIG)
    home.drain()
    assert home.collection.document(doc).error  # type: ignore[union-attr]  # the old version still served
    assert _sha(TOO_BIG) in home.stored()  # kept for retry
    _delete(home, doc)


def put_failed_retried_then_delete(home: Home, doc: int) -> None:
    _put(home, doc, TOO_BIG)
    home.drain()
    _retry(home, doc)
    _delete(home, doc)
    home.drain()


def put_twice_then_delete_before_the_jobs_ran(home: Home, doc: int) -> None:
    _put(home, doc, B)
    _put(home, doc, C)
    _delete(home, doc)
    home.drain()


def put_then_delete_from_another_process(home: Home, doc: int) -> None:
    _put(home, doc, B)
    _delete(home, doc, home.another_process())  # knows the replacement only through the queue
    home.drain()


def delete_during_indexing(home: Home, doc: int) -> None:
    _put(home, doc, B)
    started, release = threading.Event(), threading.Event()
    index = home.collection.index_document

    def slow(source):  # type: ignore[no-untyped-def]
        started.set()
        assert release.wait(30)
        return index(source)

    home.collection.index_document = slow  # type: ignore[method-assign]
    worker = threading.Thread(target=home.drain)
    worker.start()
    assert started.wait(30)
    deleter = threading.Thread(target=_delete, args=(home, doc))
    deleter.start()  # waits for the job on the collection's write lock
    release.set()
    worker.join(30)
    deleter.join(30)
    assert not worker.is_alive() and not deleter.is_alive()


def new_upload_then_delete_before_its_job(home: Home, doc: int) -> None:
    _delete(home, doc)
    fresh = uploads.upload(home.collection, home.queue, "fresh.md", C).document
    _delete(home, fresh.id)
    home.drain()


ORDERS: list[Order] = [put_then_delete_before_the_job_ran, put_then_delete_after_the_job_ran, put_failed_then_delete,
                       put_failed_retried_then_delete, put_twice_then_delete_before_the_jobs_ran,
                       put_then_delete_from_another_process, delete_during_indexing,
                       new_upload_then_delete_before_its_job]


@pytest.mark.parametrize("order", ORDERS, ids=[o.__name__ for o in ORDERS])
def test_no_original_outlives_its_document(home: Home, order: Order) -> None:
    keep = _indexed(home, "keep.md", KEEP)
    doc = _indexed(home, "notes.md", A)
    order(home, doc)
    assert home.collection.document(doc) is None
    assert [d.id for d in home.collection.documents()] == [keep]
    assert home.stored() == {_sha(KEEP)}  # nothing of the deleted document, the bystander's bytes intact
    assert home.collection.read_original(home.collection.document(keep)) == KEEP  # type: ignore[arg-type]


def test_a_failed_replacement_goes_once_a_newer_one_is_served(home: Home) -> None:
    doc = _indexed(home, "notes.md", A)
    _put(home, doc, TOO_BIG)
    home.drain()
    assert home.stored() == {_sha(A), _sha(TOO_BIG)}  # the failed bytes stay for `retry`
    _put(home, doc, C)
    home.drain()
    served = home.collection.document(doc)
    assert served is not None and served.sha256 == _sha(C) and not served.error
    assert home.stored() == {_sha(C)}


def test_a_failed_replacement_goes_when_another_process_submits_the_next(home: Home) -> None:
    doc = _indexed(home, "notes.md", A)
    _put(home, doc, TOO_BIG)
    home.drain()
    other = home.another_process()  # its own record of submissions is empty: the queue tells it
    current = other.document(doc)
    assert current is not None
    uploads.replace(other, home.queue, current, C)
    assert home.stored() == {_sha(A), _sha(C)}
    home.drain()
    assert home.stored() == {_sha(C)}


def test_a_replacement_shared_with_another_document_stays_while_that_one_waits(home: Home) -> None:
    first, second = _indexed(home, "notes.md", A), _indexed(home, "other.md", KEEP)
    _put(home, first, B)
    _put(home, second, B)  # the same new bytes for both
    _delete(home, first)  # the second document's job still needs them
    assert _sha(B) in home.stored()
    home.drain()
    served = home.collection.document(second)
    assert served is not None and served.sha256 == _sha(B)
    assert home.stored() == {_sha(B)}
