"""What an HTTP adapter checks TLS with: the system's CA store for HTTPS, and for a model server on plain
HTTP a context that trusts nothing (the CA store costs ~65 ms of CPU a start and such a client never
makes a TLS connection; should it ever, it must refuse the certificate, not accept it)."""

from __future__ import annotations

import ssl

import pytest

from mcp_sampling_proxy.providers.http_adapter import tls_context

pytestmark = pytest.mark.usefixtures("no_proxy_variables")


def test_an_https_endpoint_is_checked_against_the_system_store() -> None:
    assert tls_context("https://api.openai.com/v1") is True


def test_a_plain_http_endpoint_gets_a_context_that_verifies_and_trusts_nothing() -> None:
    context = tls_context("http://127.0.0.1:11434/v1")
    assert isinstance(context, ssl.SSLContext)
    assert context.verify_mode == ssl.CERT_REQUIRED and context.check_hostname
    assert context.get_ca_certs() == [] and context.cert_store_stats()["x509_ca"] == 0


@pytest.mark.parametrize("variable", ["HTTP_PROXY", "all_proxy"])
def test_through_a_proxy_the_environment_names_the_system_store_is_kept(
    monkeypatch: pytest.MonkeyPatch, variable: str
) -> None:
    """The proxy itself may speak TLS."""
    monkeypatch.setenv(variable, "https://proxy.example:3128")
    assert tls_context("http://127.0.0.1:11434/v1") is True
