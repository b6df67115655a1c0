"""Sources: the origins a collection's documents are synced from (a folder, a Git repository, a website), each
behind the Upstream protocol of base.py, one kind per module, picked here. The sync itself (the store, the lease,
removals, the schedule) is the application core's: citerag.app.sources."""

from __future__ import annotations

import re
from pathlib import Path

from citerag.errors import CiteragError
from citerag.globs import glob_regex
from citerag.sources.base import Change, Failed, Fetched, Known, Unchanged, Unreachable, Upstream
from citerag.types import GROUP, TAG, SourceInfo

NAME = re.compile(r"[a-z0-9][a-z0-9_-]{0,63}")
KINDS = ("folder", "git", "web")
# The options each kind takes (`citerag sources add` and the API check them against this before storing).
OPTIONS = {
    "folder": {"globs", "max_bytes", "watch", "tags", "groups"},
    "git": {"branch", "globs", "link", "max_bytes", "tags", "groups"},
    "web": {"sitemap", "prefix", "rate", "max_pages", "max_bytes", "tags", "groups"},
}


def rule_tags(options: dict[str, object], key: str, option: str = "tags") -> list[str] | None:
    """The tags (or, for option "groups", the groups that may read it) a source's rules give the document at `key`
    (its relative path, repository path or URL): each rule [GLOB, VALUE] whose glob matches adds its value; None
    when the source has no rules (its documents' are then left as people set them)."""
    rules = options.get(option)
    if not isinstance(rules, list):
        return None
    found: list[str] = []
    for glob, tag in rules:
        if glob_regex(glob).match(key.lstrip("/")) and tag not in found:
            found.append(tag)
    return found


def checked(info: SourceInfo) -> SourceInfo:
    """The source as given, or a CiteragError naming what is wrong (before anything is stored)."""
    if not NAME.fullmatch(info.name):
        raise CiteragError(f"source name {info.name!r}: use 1-64 of a-z, 0-9, '-' and '_', starting with a letter "
                           "or digit")
    if info.kind not in KINDS:
        raise CiteragError(f"source kind {info.kind!r}: one of {', '.join(KINDS)}")
    unknown = sorted(set(info.options) - OPTIONS[info.kind])
    if unknown:
        raise CiteragError(f"a {info.kind} source takes no option {unknown[0]!r} (it takes: "
                           f"{', '.join(sorted(OPTIONS[info.kind]))})")
    for option, pattern, example in (("tags", TAG, "docs/runbooks/**=sre"), ("groups", GROUP, "hr/**=hr")):
        for rule in info.options.get(option) or []:
            if not (isinstance(rule, list | tuple) and len(rule) == 2 and all(isinstance(x, str) for x in rule)
                    and rule[0].strip("/") and pattern.fullmatch(rule[1])):
                raise CiteragError(f"{option} rule {rule!r}: give [GLOB, {option[:-1].upper()}], letters, digits "
                                   f"and . _ : / - ({example})")
    if info.kind == "folder" and not Path(info.location).is_absolute():
        raise CiteragError(f"folder {info.location!r}: give an absolute path")
    if info.kind == "web" and not re.match(r"https?://", info.location):
        raise CiteragError(f"web source {info.location!r}: give an http:// or https:// URL")
    if info.interval_s is not None and info.interval_s < 1:
        raise CiteragError(f"interval {info.interval_s}: at least 1 second")
    if info.cron:
        from croniter import croniter

        if not croniter.is_valid(info.cron):
            raise CiteragError(f"cron {info.cron!r} is not a cron expression (five fields: minute hour day month "
                               "weekday)")
        if info.interval_s:
            raise CiteragError("give an interval or a cron expression, not both")
    return info


def open_upstream(info: SourceInfo, workdir: Path) -> Upstream:
    """The source's origin, ready to scan; `workdir` is this source's private cache (a Git source's clone)."""
    o = info.options
    if info.kind == "folder":
        from citerag.sources.folder import FolderSource

        return FolderSource(Path(info.location), globs=o.get("globs") or (), max_bytes=o.get("max_bytes", 20_000_000))
    if info.kind == "git":
        from citerag.sources.git import GitSource

        return GitSource(info.location, workdir, branch=o.get("branch"), link_template=o.get("link"),
                         **({"globs": o["globs"]} if o.get("globs") else {}),
                         **({"max_bytes": o["max_bytes"]} if o.get("max_bytes") else {}))
    if info.kind == "web":
        from citerag.sources.web import WebSource

        return WebSource(info.location, sitemap=o.get("sitemap"), prefix=o.get("prefix"),
                         rate_per_host=o.get("rate", 4.0), max_pages=o.get("max_pages", 500),
                         max_bytes=o.get("max_bytes", 20_000_000))
    raise CiteragError(f"unknown source kind {info.kind!r} (one of: {', '.join(KINDS)})")


__all__ = ["KINDS", "OPTIONS", "Change", "Failed", "Fetched", "Known", "Unchanged", "Unreachable", "Upstream",
           "checked", "open_upstream", "rule_tags"]
