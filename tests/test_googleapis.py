"""Google's REST APIs through the real client: each failure a user meets is one line that says
what to do, answers are held to the published schemas, and a listing cannot run for ever."""

from __future__ import annotations

import pytest

from tests.googleapi_fakes import PERIMETER_VIOLATION_ID, FakeGoogle, api_disabled, error, ok, perimeter_refused
from trainstack.base.googleapis import MAX_PAGES, GoogleApiError, build_service, execute, pages

REGION = {
    "kind": "compute#region",
    "name": "us-central1",
    "status": "UP",
    "quotas": [{"metric": "CPUS", "limit": 24.0, "usage": 4.0}],
}


def region_of(http: FakeGoogle) -> dict[str, object]:
    compute = build_service("compute", "v1", http=http)
    return execute(
        compute.regions().get(project="my-project", region="us-central1"), "the quotas of us-central1", "my-project"
    )


def test_an_answer_is_read_through_the_real_client_at_the_documented_path() -> None:
    http = FakeGoogle([ok("compute", "v1", "compute.regions.get", REGION)])
    assert region_of(http)["quotas"] == REGION["quotas"]
    assert http.uris[0].startswith("https://compute.googleapis.com/compute/v1/projects/my-project/regions/us-central1")
    http.assert_all_used()


def test_an_answer_the_api_could_not_send_is_refused_by_the_fake() -> None:
    with pytest.raises(AssertionError, match="no field 'limits'"):
        ok(
            "compute",
            "v1",
            "compute.regions.get",
            {"name": "us-central1", "quotas": [{"metric": "CPUS", "limits": 24}]},
        )
    with pytest.raises(AssertionError, match="not one of the schema's values"):
        ok("compute", "v1", "compute.regions.get", {"quotas": [{"metric": "NOT_A_METRIC", "limit": 1.0}]})
    with pytest.raises(AssertionError, match="expected a string"):
        ok("compute", "v1", "compute.regions.get", {"id": 12})  # uint64 travels as a string


def test_a_disabled_api_names_the_command_that_enables_it() -> None:
    with pytest.raises(GoogleApiError) as caught:
        region_of(FakeGoogle([api_disabled("compute.googleapis.com")]))
    line = str(caught.value)
    assert "\n" not in line
    assert line.startswith("the quotas of us-central1: the API is disabled")
    assert "gcloud services enable compute.googleapis.com --project my-project" in line


def test_permission_denied_is_one_line_with_google_s_reason() -> None:
    answer = error(403, "Required 'compute.regions.get' permission for 'projects/my-project'", reason="forbidden")
    with pytest.raises(GoogleApiError, match=r"permission denied \(Required 'compute.regions.get' permission"):
        region_of(FakeGoogle([answer]))


def test_a_perimeter_refusal_is_told_apart_from_a_missing_role() -> None:
    with pytest.raises(GoogleApiError) as caught:
        region_of(FakeGoogle([perimeter_refused("compute.googleapis.com")]))
    line = str(caught.value)
    assert "refused by a VPC Service Controls perimeter" in line
    assert f"violation {PERIMETER_VIOLATION_ID}" in line
    assert "permission denied" not in line
    assert "docs/deploying.md#vpc-service-controls" in line


def test_credentials_refused_and_not_found_say_so() -> None:
    with pytest.raises(GoogleApiError, match=r"credentials refused .*gcloud auth application-default login"):
        region_of(FakeGoogle([error(401, "Request had invalid authentication credentials.")]))
    with pytest.raises(
        GoogleApiError, match=r"not found \(The resource 'projects/my-project/regions/mars1' was not found\)"
    ):
        region_of(
            FakeGoogle(
                [error(404, "The resource 'projects/my-project/regions/mars1' was not found", reason="notFound")]
            )
        )


def test_an_answer_that_is_not_json_is_one_line() -> None:
    with pytest.raises(GoogleApiError, match="the answer was not a JSON object"):
        region_of(FakeGoogle([({"status": "200"}, "<html>proxy login</html>")]))


def test_a_listing_that_keeps_naming_a_next_page_stops() -> None:
    page = {"items": [], "nextPageToken": "again"}
    http = FakeGoogle([ok("compute", "v1", "compute.regions.list", page)] * (MAX_PAGES + 1))
    compute = build_service("compute", "v1", http=http)
    with pytest.raises(GoogleApiError, match=f"more than {MAX_PAGES} pages"):
        list(
            pages(
                compute.regions().list(project="my-project"), compute.regions().list_next, "the regions", "my-project"
            )
        )
    assert len(http.uris) == MAX_PAGES
