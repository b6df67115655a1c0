"""A Git repository as a source: the files at a branch's head that match some globs, read through the system `git`
binary (any URL git can reach: file://, git://, https, ssh) and kept in a bare clone in a private cache folder, so a
re-sync fetches only the new objects.

A document's token is its blob id. Comparing the head tree's blob ids with the ones the collection recorded is what
a diff between the last synced commit and the head computes, but it needs no "last commit" and so stays right after
an interrupted sync, a force-push or a changed branch: whatever was not recorded is fetched again.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import uuid
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path, PurePosixPath
from urllib.parse import quote, urlsplit, urlunsplit

from citerag.errors import CiteragError
from citerag.globs import glob_regex
from citerag.sources.base import Change, Failed, Fetched, Known, Unchanged, Unreachable

DEFAULT_GLOBS = ("**/*.md", "**/*.markdown", "**/*.rst", "**/*.txt", "**/*.html", "**/*.htm")
MAX_BYTES = 20_000_000
_SKIPPED_MODES = ("120000", "160000")  # symlinks and submodules: no bytes of this repository to index
# Variables a git hook or a user's shell may set that would point our git at another repository.
_LOCAL_VARS = ("GIT_DIR", "GIT_WORK_TREE", "GIT_INDEX_FILE", "GIT_OBJECT_DIRECTORY", "GIT_COMMON_DIR",
               "GIT_ALTERNATE_OBJECT_DIRECTORIES", "GIT_NAMESPACE", "GIT_PREFIX")
_BOILERPLATE = ("fatal: Could not read from remote repository", "Please make sure you have the correct access",
                "and the repository exists")


class _GitError(Exception):
    """A git command failed or timed out; its message is one line."""


def redact(url: str) -> str:
    """`url` without the credentials it may carry (https://user:token@host/…), for messages and logs."""
    parts = urlsplit(url)
    if "@" not in parts.netloc:
        return url
    return urlunsplit(parts._replace(netloc="***@" + parts.netloc.rpartition("@")[2]))


class GitSource:
    """One branch of one repository. `scan` raises Unreachable when the repository cannot be fetched."""

    def __init__(self, url: str, workdir: Path, *, branch: str | None = None, globs: Sequence[str] = DEFAULT_GLOBS,
                 link_template: str | None = None, timeout: float = 120.0, max_bytes: int = MAX_BYTES) -> None:
        if link_template is not None:
            try:  # a typo in the template is a configuration error now, not a failure at every document
                link_template.format(commit="", path="", branch="")
            except (KeyError, IndexError, ValueError) as e:
                raise CiteragError(f"link template {link_template!r}: only {{commit}}, {{path}} and {{branch}} "
                                   f"can be used ({e!r})") from None
        self.url, self.workdir, self.branch = url, Path(workdir), branch
        self.globs = [glob_regex(g) for g in globs]
        self.link_template, self.timeout, self.max_bytes = link_template, timeout, max_bytes
        self.complete = False
        self.commit = ""  # the commit the last scan read
        self.fetched_paths: list[str] = []  # every path whose blob the last scan read
        self._env = {k: v for k, v in os.environ.items() if k not in _LOCAL_VARS}
        self._env["GIT_TERMINAL_PROMPT"] = "0"  # a missing credential fails at once instead of waiting for a tty
        self._env.setdefault("GIT_SSH_COMMAND", "ssh -o BatchMode=yes")

    @property
    def _repo(self) -> Path:
        return self.workdir / "repo.git"

    def _git(self, *args: str, check: bool = True) -> bytes:
        # Its own session, so a timeout kills the helpers too (git-remote-https, index-pack), not only `git`.
        proc = subprocess.Popen(["git", "-c", "protocol.file.allow=always", *args], stdin=subprocess.DEVNULL,
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=self._env, start_new_session=True)
        try:
            out, err = proc.communicate(timeout=self.timeout)
        except BaseException as e:  # a timeout, or an interrupt that must not leave git running
            os.killpg(proc.pid, signal.SIGKILL)
            proc.communicate()
            if isinstance(e, subprocess.TimeoutExpired):
                raise _GitError(f"no answer within {self.timeout:g} s") from None
            raise
        if check and proc.returncode != 0:
            # git's own lines in one, less the advice it prints after any remote failure
            lines = [line.strip() for line in err.decode(errors="replace").splitlines()
                     if line.strip() and not line.startswith(_BOILERPLATE)]
            message = " ".join(lines)[:400] or f"git exited with {proc.returncode}"
            raise _GitError(message.replace(self.url, redact(self.url)))
        return out if proc.returncode == 0 else b""

    def _unreachable(self, e: _GitError) -> Unreachable:
        return Unreachable(f"git repository {redact(self.url)}: {e}")

    def _remote(self) -> tuple[str, str]:
        """The branch to read (the remote's HEAD branch unless one was configured) and its commit there."""
        ref = f"refs/heads/{self.branch}" if self.branch else "HEAD"
        try:
            text = self._git("ls-remote", "--symref", "--", self.url, ref).decode(errors="replace")
        except _GitError as e:
            raise self._unreachable(e) from None
        symref, commits = "", {}
        for line in text.splitlines():
            left, _, name = line.partition("\t")
            if left.startswith("ref: refs/heads/") and name == "HEAD":
                symref = left.removeprefix("ref: refs/heads/")
            else:
                commits[name] = left
        if self.branch:
            if ref not in commits:
                raise Unreachable(f"git repository {redact(self.url)}: no branch {self.branch!r}")
            return self.branch, commits[ref]
        if not symref:
            raise Unreachable(f"git repository {redact(self.url)}: no HEAD branch (an empty repository?)")
        return symref, commits.get("HEAD", "")

    def _clone(self, branch: str) -> None:
        """A fresh bare clone, made under a temporary name and renamed into place, so the cache is always whole."""
        self.workdir.mkdir(parents=True, exist_ok=True)
        for leftover in self.workdir.glob(".tmp-*"):  # what a killed run left half made
            shutil.rmtree(leftover, ignore_errors=True)
        tmp = self.workdir / f".tmp-{uuid.uuid4().hex}"
        try:
            self._git("clone", "--bare", "--no-tags", "--single-branch", "--branch", branch, "--", self.url,
                      str(tmp))
        except _GitError as e:
            shutil.rmtree(tmp, ignore_errors=True)
            raise self._unreachable(e) from None
        if self._repo.exists():  # moved aside first: a run killed here leaves a leftover, never a half-deleted cache
            self._repo.rename(self.workdir / f".tmp-{uuid.uuid4().hex}")
        tmp.rename(self._repo)
        for leftover in self.workdir.glob(".tmp-*"):
            shutil.rmtree(leftover, ignore_errors=True)

    def _update(self, branch: str, remote_commit: str) -> tuple[str, list[tuple[str, str, str]]]:
        """Fetch the branch into the cache if it moved; the head commit and its matching files (path, blob, mode).
        Raises _GitError when the cache is not whole (a killed run, a disk error)."""
        repo = str(self._repo)
        self._git("--git-dir", repo, "rev-parse", "--git-dir")
        ref = f"refs/heads/{branch}"
        if self._git("--git-dir", repo, "rev-parse", "-q", "--verify", ref + "^{commit}", check=False).strip() \
                .decode() != remote_commit:
            self._git("--git-dir", repo, "fetch", "--prune", "--no-tags", "--", self.url, f"+{ref}:{ref}")
        commit = self._git("--git-dir", repo, "rev-parse", "--verify", ref + "^{commit}").strip().decode()
        listing = self._git("--git-dir", repo, "ls-tree", "-r", "-l", "-z", "--full-tree", commit)
        files = []
        for record in listing.split(b"\0"):
            meta, _, raw_path = record.partition(b"\t")
            if not raw_path:
                continue
            mode, kind, oid, size = meta.decode().split()
            path = raw_path.decode(errors="replace")
            # ls-tree says "BAD" for the size of a blob the cache lacks: listed, so reading it reports the loss
            small = not size.isdigit() or int(size) <= self.max_bytes
            if kind == "blob" and mode not in _SKIPPED_MODES and small and any(g.match(path) for g in self.globs):
                files.append((path, oid, mode))
        return commit, files

    def scan(self, known: Mapping[str, Known]) -> Iterator[Change]:
        self.complete, self.fetched_paths = False, []
        branch, remote_commit = self._remote()
        try:
            commit, files = self._update(branch, remote_commit)
        except _GitError:
            # The remote answered ls-remote a moment ago, so this is most likely a cache a killed run or a disk
            # error left broken (or a branch that no longer shares history): clone afresh and read that.
            self._clone(branch)
            try:
                commit, files = self._update(branch, remote_commit)
            except _GitError as e:
                raise self._unreachable(e) from None
        self.commit = commit
        broken = False
        reader: subprocess.Popen[bytes] | None = None
        try:
            for path, oid, _ in files:
                if (k := known.get(path)) is not None and k.token == oid:
                    yield Unchanged(path, oid)
                    continue
                if reader is None:  # one process reads every changed blob
                    reader = subprocess.Popen(["git", "--git-dir", str(self._repo), "cat-file", "--batch"],
                                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, env=self._env)
                self.fetched_paths.append(path)
                data = _read_blob(reader, oid)
                if data is None:
                    broken = True
                    yield Failed(path, f"blob {oid} is missing from the local clone of {redact(self.url)}")
                    continue
                link = ("" if self.link_template is None else
                        self.link_template.format(commit=commit, path=quote(path), branch=quote(branch)))
                yield Fetched(key=path, token=oid, name=PurePosixPath(path).name, data=data, link=link,
                              origin=f"{path} at {commit[:12]}")
            self.complete = True
        finally:
            if reader is not None:
                assert reader.stdin is not None
                reader.stdin.close()
                try:
                    reader.wait(timeout=10)
                except subprocess.TimeoutExpired:
                    reader.kill()
                    reader.wait()
            if broken:  # the next scan clones afresh rather than failing on the same objects again
                shutil.rmtree(self._repo, ignore_errors=True)


def _read_blob(reader: subprocess.Popen[bytes], oid: str) -> bytes | None:
    """One blob through `git cat-file --batch` (asked and read one at a time, so no pipe ever fills up)."""
    assert reader.stdin is not None and reader.stdout is not None
    reader.stdin.write(oid.encode() + b"\n")
    reader.stdin.flush()
    header = reader.stdout.readline().split()
    if len(header) != 3 or header[1] != b"blob":
        return None
    size = int(header[2])
    data = reader.stdout.read(size + 1)  # the blob and its trailing newline
    return data[:size] if len(data) == size + 1 else None
