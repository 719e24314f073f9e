"""A LangChain embeddings class that, like a provider's client, embeds only with an accepted API key: the
secrets tests build indexes with it, the key read from the environment (``api_key_env``)."""

from __future__ import annotations

from langchain_core.embeddings import DeterministicFakeEmbedding

# The keys the "provider" accepts: a rotation makes a new one valid beside the old one.
ACCEPTED_KEYS = {"sk-test-SECRET-embed-key-one", "sk-test-SECRET-embed-key-two"}
PATH = "helpers_secrets.KeyedFakeEmbedding"


class KeyedFakeEmbedding(DeterministicFakeEmbedding):
    """DeterministicFakeEmbedding behind an API key; the vectors do not depend on the key. An unknown key
    fails the way clients often do: quoting the key it was given."""

    api_key: str

    def _check(self) -> None:
        if self.api_key not in ACCEPTED_KEYS:
            raise PermissionError(f"401 Unauthorized: invalid API key {self.api_key}")

    def embed_documents(self, texts: list[str]) -> list[list[float]]:
        self._check()
        return super().embed_documents(texts)

    def embed_query(self, text: str) -> list[float]:
        self._check()
        return super().embed_query(text)
