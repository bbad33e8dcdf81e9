"""Discovery and OpenAPI answers carry the validators the real server sends, and a client's copy that
is still current gets 304 Not Modified (kubectl's and Helm's HTTP caches revalidate with them). The
capture test treats 200 and 304 alike (when a cache revalidates is timing), so the 304s are held here."""

from __future__ import annotations

import email.utils

import orjson
from multidict import CIMultiDict

from tests.devcluster.conftest import ApiServer, Http, crd

AGGREGATED = "application/json;g=apidiscovery.k8s.io;v=v2;as=APIGroupDiscoveryList"


async def _get(http: Http, path: str, **headers: str) -> tuple[int, CIMultiDict[str], bytes]:
    async with http.session.get(path, headers=headers, allow_redirects=False) as resp:
        return resp.status, resp.headers.copy(), await resp.read()


async def test_aggregated_discovery_revalidates_by_etag(http: Http, apiserver: ApiServer) -> None:
    status, headers, body = await _get(http, "/apis", Accept=AGGREGATED)
    assert status == 200 and headers["Cache-Control"] == "public" and headers["Vary"] == "Accept"
    etag = headers["ETag"]
    status, headers, body = await _get(http, "/apis", Accept=AGGREGATED, **{"If-None-Match": etag})
    assert (status, body, headers["ETag"]) == (304, b"", etag)
    apiserver.store.registry.register_crd(crd())  # a new group: a new document, a new validator
    status, headers, _ = await _get(http, "/apis", Accept=AGGREGATED, **{"If-None-Match": etag})
    assert status == 200 and headers["ETag"] != etag


async def test_openapi_index_revalidates_by_date_and_documents_by_hash(http: Http, apiserver: ApiServer) -> None:
    status, headers, body = await _get(http, "/openapi/v3")
    assert status == 200 and headers["Cache-Control"] == "no-cache, private"
    since = headers["Last-Modified"]
    assert (await _get(http, "/openapi/v3", **{"If-Modified-Since": since}))[0] == 304
    url = orjson.loads(body)["paths"]["apis/apps/v1"]["serverRelativeURL"]
    status, headers, _ = await _get(http, url)
    assert status == 200 and headers["Cache-Control"] == "public, immutable" and "Expires" in headers
    assert (await _get(http, url, **{"If-None-Match": headers["ETag"]}))[0] == 304
    status, headers, _ = await _get(http, "/openapi/v3/apis/apps/v1?hash=stale")
    assert (status, headers["Location"]) == (301, url)

    apiserver.store.registry.register_crd(crd())  # the index changes: its date moves past the client's
    status, headers, _ = await _get(http, "/openapi/v3", **{"If-Modified-Since": since})
    assert status == 200
    assert email.utils.parsedate_to_datetime(headers["Last-Modified"]) > email.utils.parsedate_to_datetime(since)


async def test_other_answers_say_no_cache(http: Http) -> None:
    status, headers, _ = await _get(http, "/api/v1/namespaces/default/configmaps")
    assert status == 200 and headers["Cache-Control"] == "no-cache, private"
    async with http.session.get("/api/v1/namespaces/default/configmaps?watch=true&timeoutSeconds=1") as resp:
        assert resp.headers["Cache-Control"] == "no-cache, private"
