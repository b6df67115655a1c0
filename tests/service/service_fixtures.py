"""What the service tests share: the mixed folder, the deployment's keys. A plain module (not conftest), so that
`from service_fixtures import ...` finds it whichever conftest pytest imported first."""

from __future__ import annotations

from dataclasses import dataclass

from live import LiveServer

from corpus_paths import DATA, DEV_CORPUS

# A mixed folder: two dev-set chapters (HTML) and one real sample of each other kind of locator.
MIXED = [DEV_CORPUS / "ch03.en.html", DEV_CORPUS / "ch04.en.html",
         DATA / "samples" / "pdf-2col-paper-jner2016-ccby.pdf",
         DATA / "samples" / "docx-python-docx-paras-tables.docx",
         DATA / "samples" / "xlsx-readxl-datasets.xlsx",
         DATA / "samples" / "vtt-youtube-dl.vtt"]
# The second team's collection: a chapter the first one does not have.
OTHER = [DEV_CORPUS / "ch08.en.html"]


@dataclass
class Deployment:
    """One server with keys required, two collections, and a key per role."""

    server: LiveServer
    admin: str  # server admin: every collection
    team_a: str  # write on "default" (the mixed folder)
    team_b: str  # write on "other" (one chapter)
    reader_a: str  # read on "default"
    ids: dict[str, int]  # file name -> document id in "default"
