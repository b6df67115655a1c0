"""citerag.service.oidc against a real OpenID Connect provider on loopback (oidc-provider, tests/oidc): the
authorization code flow with PKCE walked through the provider's own login and consent pages (httpx, no browser),
the identity and groups it yields, and the ID tokens, states and responses it must refuse."""

from __future__ import annotations

import base64
import json
import threading
import time
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

import httpx
import jwt
import pytest
from cryptography.hazmat.primitives.asymmetric import rsa
from jwt.algorithms import RSAAlgorithm

import oidc_provider as oidc_provider_module
from citerag.errors import CiteragError
from citerag.service.oidc import (
    Identity,
    OidcClient,
    OidcConfig,
    OidcError,
    Pending,
    PendingLogins,
    identity_from_claims,
)
from oidc_provider import oidc_provider, sign_in_without_browser

REDIRECT = "http://127.0.0.1:9/auth/callback"  # nothing listens there: the walk stops at the redirect to it
KEY = rsa.generate_private_key(public_exponent=65537, key_size=2048)
KID = "test-key"
# The provider signs with a key the tests hold too, so they can mint the tokens a real provider never would
# (expired, another issuer) and still have them pass the signature check.
PROVIDER_CONFIG: dict[str, Any] = {
    "clients": [
        {"client_id": "citerag", "client_secret": "citerag-secret", "redirect_uris": [REDIRECT]},
        {"client_id": "other-app", "client_secret": "other-secret", "redirect_uris": [REDIRECT]},
        {"client_id": "public-cli", "redirect_uris": [REDIRECT]},  # no secret: a public client, PKCE alone
    ],
    "accounts": {
        "alice": {"preferred_username": "alice", "name": "Alice Liddell", "email": "alice@example.org",
                  "groups": ["staff", "admins"], "roles": ["editor", "reviewer"]},
        "bob": {"name": "Bob Builder", "email": "bob@example.org", "groups": ["readers"], "roles": "viewer"},
        "carol": {"email": "carol@example.org"},  # no name, no groups
    },
    "claims": {"roles": ["roles"]},  # a second groups-like claim, under a scope of its own
    "jwks": {"keys": [{**RSAAlgorithm.to_jwk(KEY, as_dict=True), "kid": KID, "use": "sig", "alg": "RS256"}]},
}
SECRETS = {"citerag": "citerag-secret", "other-app": "other-secret", "public-cli": None}


@pytest.fixture(scope="module")
def issuer() -> Iterator[str]:
    with oidc_provider(PROVIDER_CONFIG) as url:
        yield url


def client(issuer: str, client_id: str = "citerag", **kwargs: Any) -> OidcClient:
    return OidcClient(OidcConfig(issuer, client_id, SECRETS[client_id], **kwargs))


def sign_in(oidc: OidcClient, login: str, cancel: bool = False) -> tuple[Pending, dict[str, str]]:
    """A fresh browser's sign-in as `login`: what the server keeps, and the callback's query parameters."""
    url, pending = oidc.start(REDIRECT)
    with httpx.Client(timeout=10) as browser:
        return pending, sign_in_without_browser(browser, url, login, REDIRECT, cancel=cancel)


def id_token(issuer: str, login: str, client_id: str = "citerag") -> str:
    """A real ID token from the provider's token endpoint, as an API client would obtain one."""
    oidc = client(issuer, client_id)
    pending, params = sign_in(oidc, login)
    secret = SECRETS[client_id]
    response = httpx.post(oidc.metadata()["token_endpoint"], timeout=10,
                          auth=(client_id, secret) if secret else None,
                          data={"grant_type": "authorization_code", "code": params["code"],
                                "redirect_uri": REDIRECT, "code_verifier": pending.code_verifier,
                                **({} if secret else {"client_id": client_id})})
    response.raise_for_status()
    return str(response.json()["id_token"])


def minted(issuer: str, key: Any = KEY, kid: str = KID, algorithm: str = "RS256", **claims: Any) -> str:
    """A token signed with the provider's own key (or `key`), with `claims` over sensible defaults."""
    now = int(time.time())
    payload = {"iss": issuer, "aud": "citerag", "sub": "alice", "iat": now, "exp": now + 300,
               "groups": ["staff"], **claims}
    return jwt.encode({k: v for k, v in payload.items() if v is not None}, key, algorithm=algorithm,
                      headers={"kid": kid})


def refused(call: Any, *args: Any, match: str) -> str:
    with pytest.raises(OidcError, match=match) as caught:
        call(*args)
    message = str(caught.value)
    assert isinstance(caught.value, CiteragError) and "\n" not in message and "Traceback" not in message
    return message


# The flow.

def test_two_accounts_sign_in_with_their_own_identity_and_groups(issuer: str) -> None:
    oidc = client(issuer)
    for login, expected in [("alice", Identity("alice", "alice", ("staff", "admins"))),
                            ("bob", Identity("bob", "Bob Builder", ("readers",))),
                            ("carol", Identity("carol", "carol@example.org", ()))]:
        pending, params = sign_in(oidc, login)
        assert set(params) == {"code", "state", "iss"} and params["state"] == pending.state
        assert oidc.finish(pending, params) == expected


def test_the_authorization_request_carries_pkce_s256_state_and_nonce(issuer: str) -> None:
    url, pending = client(issuer).start(REDIRECT)
    query = dict(parse_qsl(urlsplit(url).query))
    assert url.startswith(issuer + "/auth?")
    assert query["code_challenge_method"] == "S256" and query["code_challenge"] != pending.code_verifier
    assert query["state"] == pending.state and query["nonce"] == pending.nonce
    assert query["redirect_uri"] == REDIRECT and query["client_id"] == "citerag"
    assert query["scope"] == "openid profile email groups"
    assert "code_verifier" not in url and pending.state != pending.nonce


def test_a_public_client_signs_in_with_pkce_alone(issuer: str) -> None:
    oidc = client(issuer, "public-cli")
    pending, params = sign_in(oidc, "bob")
    assert oidc.finish(pending, params) == Identity("bob", "Bob Builder", ("readers",))


def test_the_provider_requires_pkce(issuer: str) -> None:
    url, pending = client(issuer).start(REDIRECT)
    parts = urlsplit(url)
    query = {k: v for k, v in parse_qsl(parts.query) if not k.startswith("code_challenge")}
    with httpx.Client(timeout=10) as browser:
        params = sign_in_without_browser(browser, urlunsplit(parts._replace(query=urlencode(query))), "alice",
                                         REDIRECT)
    assert params["error"] == "invalid_request" and "requires PKCE" in params["error_description"]
    assert "provider refused the sign-in: invalid_request" in refused(client(issuer).finish, pending, params,
                                                                     match="refused")


def test_the_code_is_refused_without_the_right_verifier(issuer: str) -> None:
    oidc = client(issuer)
    pending, params = sign_in(oidc, "alice")
    refused(oidc.finish, replace(pending, code_verifier="x" * 64), params, match="refused the authorization code")


def test_a_wrong_or_missing_state_is_refused_before_the_code_is_used(issuer: str) -> None:
    oidc = client(issuer)
    pending, params = sign_in(oidc, "alice")
    refused(oidc.finish, pending, {**params, "state": "forged"}, match="state does not match")
    refused(oidc.finish, pending, {k: v for k, v in params.items() if k != "state"}, match="state does not match")
    assert oidc.finish(pending, params).subject == "alice"  # the code was not spent on the refused attempts


def test_a_code_works_once(issuer: str) -> None:
    oidc = client(issuer)
    pending, params = sign_in(oidc, "bob")
    assert oidc.finish(pending, params).subject == "bob"
    refused(oidc.finish, pending, params, match="refused the authorization code")


def test_a_nonce_of_another_login_is_refused(issuer: str) -> None:
    oidc = client(issuer)
    pending, params = sign_in(oidc, "alice")
    refused(oidc.finish, replace(pending, nonce="another"), params, match="nonce")


def test_a_cancelled_sign_in_reports_the_providers_error(issuer: str) -> None:
    oidc = client(issuer)
    pending, params = sign_in(oidc, "alice", cancel=True)
    assert params["error"] == "access_denied" and params["state"] == pending.state
    message = refused(oidc.finish, pending, params, match="refused the sign-in: access_denied")
    assert "aborted" in message


def test_an_unknown_account_is_denied_and_the_browser_may_sign_in_again(issuer: str) -> None:
    oidc = client(issuer)
    with httpx.Client(timeout=10) as browser:
        url, pending = oidc.start(REDIRECT)
        params = sign_in_without_browser(browser, url, "mallory", REDIRECT)
        refused(oidc.finish, pending, params, match="access_denied .*unknown account mallory")
        url, pending = oidc.start(REDIRECT)
        assert oidc.finish(pending, sign_in_without_browser(browser, url, "bob", REDIRECT)).subject == "bob"
        # The provider now remembers this browser's session and grant: the next sign-in shows no page at all.
        url, pending = oidc.start(REDIRECT)
        response = browser.get(url)
        assert response.is_redirect and response.headers["location"].startswith(REDIRECT + "?code=")


def test_a_response_from_another_issuer_or_without_code_is_refused(issuer: str) -> None:
    oidc = client(issuer)
    pending, params = sign_in(oidc, "alice")
    refused(oidc.finish, pending, {**params, "iss": "http://127.0.0.1:1"}, match="another issuer")
    refused(oidc.finish, pending, {"state": pending.state}, match="no authorization code")


# Bearer ID tokens.

def test_a_real_id_token_is_accepted_as_a_bearer_token(issuer: str) -> None:
    token = id_token(issuer, "alice")
    header = jwt.get_unverified_header(token)
    assert header["alg"] == "RS256" and header["kid"] == KID
    assert jwt.decode(token, options={"verify_signature": False})["groups"] == ["staff", "admins"]
    assert client(issuer).verify_bearer(token) == Identity("alice", "alice", ("staff", "admins"))


def test_a_tampered_id_token_is_refused(issuer: str) -> None:
    head, payload, signature = id_token(issuer, "bob").split(".")
    claims = json.loads(base64.urlsafe_b64decode(payload + "=" * (-len(payload) % 4)))
    claims["groups"] = ["admins"]
    forged = base64.urlsafe_b64encode(json.dumps(claims).encode()).rstrip(b"=").decode()
    refused(client(issuer).verify_bearer, f"{head}.{forged}.{signature}", match="Signature verification failed")


def test_an_id_token_for_another_client_is_refused(issuer: str) -> None:
    token = id_token(issuer, "alice", client_id="other-app")
    assert client(issuer, "other-app").verify_bearer(token).subject == "alice"
    refused(client(issuer).verify_bearer, token, match="Audience")


@pytest.mark.parametrize(("claims", "match"), [
    ({"exp": int(time.time()) - 3600}, "expired"),
    ({"iss": "http://127.0.0.1:1"}, "issuer"),
    ({"aud": ["citerag", "other-app"], "azp": "other-app"}, "another party"),
    ({"exp": None}, "exp"),
    ({"sub": None}, "sub"),
])
def test_tokens_signed_by_the_provider_but_wrong_are_refused(issuer: str, claims: dict[str, Any],
                                                              match: str) -> None:
    refused(client(issuer).verify_bearer, minted(issuer, **claims), match=match)


def test_tokens_not_signed_by_the_provider_are_refused(issuer: str) -> None:
    oidc = client(issuer)
    assert oidc.verify_bearer(minted(issuer)).groups == ("staff",)  # the minting itself is right
    other = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    refused(oidc.verify_bearer, minted(issuer, key=other), match="Signature verification failed")
    refused(oidc.verify_bearer, minted(issuer, key=other, kid="unknown"), match="not valid")
    # The client secret as an HMAC key (the algorithm confusion attack), and no signature at all.
    refused(oidc.verify_bearer, minted(issuer, key="citerag-secret" * 3, algorithm="HS256"), match="not valid")
    unsigned = jwt.encode({"iss": issuer, "aud": "citerag", "sub": "alice", "exp": time.time() + 60}, "",
                          algorithm="none", headers={"kid": KID})
    refused(oidc.verify_bearer, unsigned, match="not valid")
    for garbage in ("", "garbage", "a.b.c", "Bearer x"):
        refused(oidc.verify_bearer, garbage, match="not valid")


# Configuration.

def test_the_groups_claim_is_configurable(issuer: str) -> None:
    roles = client(issuer, groups_claim="roles", scopes="openid profile roles")
    for login, groups in [("alice", ("editor", "reviewer")), ("bob", ("viewer",))]:  # a list, or one string
        pending, params = sign_in(roles, login)
        assert roles.finish(pending, params).groups == groups
    # Without the groups scope the provider releases no groups claim: no groups, not an error.
    plain = client(issuer, scopes="openid profile")
    pending, params = sign_in(plain, "alice")
    assert plain.finish(pending, params) == Identity("alice", "alice", ())


def test_groups_other_than_strings_give_no_groups() -> None:
    for value in [None, 3, {"a": 1}, ["staff", 3], [["nested"]]]:
        assert identity_from_claims({"sub": "s", "groups": value}).groups == ()
    assert identity_from_claims({"sub": "s", "groups": []}).groups == ()
    assert identity_from_claims({"sub": "s", "name": "  ", "email": "e@x"}).name == "e@x"
    with pytest.raises(OidcError, match="no subject"):
        identity_from_claims({"sub": ""})


def test_discovery_is_checked_and_cached(issuer: str) -> None:
    oidc = client(issuer)
    assert oidc.metadata() is oidc.metadata() and oidc.metadata()["issuer"] == issuer
    assert oidc.metadata()["code_challenge_methods_supported"] == ["S256"]
    refused(client(issuer + "/").metadata, match="not for the issuer")
    refused(OidcClient(OidcConfig("http://127.0.0.1:1", "citerag", None), timeout=2).start, REDIRECT,
            match="discovery .* failed")
    with pytest.raises(OidcError, match="https"):
        OidcClient(OidcConfig("http://idp.example.org", "citerag", None))


# Pending logins.

def pending(state: str, created_at: float) -> Pending:
    return Pending(state, "nonce", "verifier", REDIRECT, created_at)


def test_pending_logins_are_handed_back_once_and_expire() -> None:
    now = [1000.0]
    logins = PendingLogins(ttl_s=600, clock=lambda: now[0])
    logins.add(pending("a", 1000.0))
    logins.add(pending("b", 1300.0))
    assert logins.pop("a") == pending("a", 1000.0) and logins.pop("a") is None and logins.pop("zzz") is None
    now[0] = 1901.0
    assert logins.pop("b") is None and len(logins) == 0  # 601 s old


def test_pending_logins_are_bounded_oldest_first() -> None:
    logins = PendingLogins(max_size=3, clock=lambda: 0.0)
    for state in "abcde":
        logins.add(pending(state, 0.0))
    assert len(logins) == 3 and logins.pop("a") is None and logins.pop("b") is None and logins.pop("e")


def test_pending_logins_are_thread_safe() -> None:
    logins = PendingLogins(max_size=100_000)
    got: list[Pending | None] = []

    def work(prefix: str) -> None:
        for i in range(2000):
            logins.add(pending(f"{prefix}{i}", time.time()))
        got.extend(logins.pop(f"{prefix}{i}") for i in range(2000))

    threads = [threading.Thread(target=work, args=(p,)) for p in "abcd"]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(got) == 8000 and all(got) and len(logins) == 0


# The provider fixture itself.

def test_a_provider_that_cannot_start_says_why_at_once() -> None:
    started = time.monotonic()
    with pytest.raises(RuntimeError, match="did not start(.|\n)*jwks configuration"), \
            oidc_provider({"jwks": {"keys": [{"kty": "nonsense"}]}}):
        pass
    assert time.monotonic() - started < 15


def test_without_the_provider_installed_the_tests_skip_or_under_ci_fail(monkeypatch: pytest.MonkeyPatch,
                                                                          tmp_path: Path) -> None:
    monkeypatch.setattr(oidc_provider_module, "OIDC_DIR", tmp_path)
    monkeypatch.delenv("CITERAG_REQUIRE_OIDC", raising=False)
    with pytest.raises(pytest.skip.Exception, match="npm ci --prefix tests/oidc"):
        oidc_provider_module.require_oidc()
    monkeypatch.setenv("CITERAG_REQUIRE_OIDC", "1")
    with pytest.raises(pytest.fail.Exception, match="CITERAG_REQUIRE_OIDC is set"):
        oidc_provider_module.require_oidc()
