"""The bout document between real node processes: API, CLI, replication, restart."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from conftest import Cluster, get, http, wait_for

pytestmark = pytest.mark.processes


def post_ops(api: str, text: str, content_type: str) -> tuple[int, dict[str, object]]:
    req = urllib.request.Request(api + "/api/v1/doc/ops", data=text.encode(), method="POST")
    req.add_header("Content-Type", content_type)
    try:
        with urllib.request.urlopen(req, timeout=10) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def doc_xml(api: str) -> str:
    with urllib.request.urlopen(api + "/api/v1/doc", timeout=10) as resp:
        assert resp.headers["Content-Type"].startswith("application/xml")
        return str(resp.read().decode())


def huddle(api: str, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "huddle", *args, "--api", api], input=stdin,
                          capture_output=True, text=True, timeout=30, check=False)


def test_operations_on_one_node_build_the_same_document_on_the_other(cluster: Cluster, tmp_path: Path) -> None:
    a, b = cluster.start("a"), cluster.start("b")
    wait_for(lambda: cluster.mesh_complete([a, b]), 20, "a and b to mesh")
    status, body = post_ops(a.api, '<add team="home"><person number="12" name="Ada"/></add>', "application/xml")
    assert status == 201, body
    ops = body["ops"]
    assert isinstance(ops, list) and len(ops[0]["eids"]) == 1
    person_eid = ops[0]["eids"][0]
    status, body = post_ops(b.api, json.dumps([
        {"op": "set", "to": {"period": 1, "jam": 1}, "attribute": "start", "value": "100"},
        {"op": "add", "to": {"period": 1, "jam": 1},
         "children": [{"tag": "lineup", "attrs": {"team": "home", "position": "jammer", "number": "12"}}]},
    ]), "application/json")
    assert status == 201, body
    wait_for(lambda: doc_xml(a.api) == doc_xml(b.api) and "lineup" in doc_xml(a.api), 10,
             "both nodes to show the same document")
    xml = doc_xml(a.api)
    assert '<person name="Ada" number="12"/>' in xml and "eid=" not in xml
    with urllib.request.urlopen(a.api + "/api/v1/doc?eids=1", timeout=10) as resp:
        assert f'eid="{person_eid}"' in resp.read().decode()
    tree = get(b.api, "/api/v1/doc?format=json&eids=true")
    assert tree["events"] == 3 and tree["dropped"] == 0
    jams = get(a.api, "/api/v1/bout/jams")
    assert jams["active"]["jam"] == 1 and jams["upcoming"] is None
    hist = get(b.api, f"/api/v1/doc/history?eid={person_eid}")
    assert hist["present"] and hist["tag"] == "person" and hist["history"][0]["op"] == "add"

    # The CLI: show, apply, export, history, jams.
    out = huddle(a.api, "doc", "apply", "-", stdin='<set period="1" jam="1"><attribute>duration</attribute>90</set>')
    assert out.returncode == 0 and "recorded" in out.stdout, out.stderr
    wait_for(lambda: "just completed: period 1 jam 1" in huddle(b.api, "doc", "jams").stdout, 10,
             "b to see jam 1 completed")
    assert huddle(b.api, "doc", "jams").stdout.splitlines()[2] == "upcoming:       period 1 jam 2"
    target = tmp_path / "bout.xml"
    out = huddle(b.api, "doc", "export", "-o", str(target))
    assert out.returncode == 0, out.stderr
    assert target.read_text() == doc_xml(a.api) and 'duration="90"' in target.read_text()
    out = huddle(a.api, "doc", "history", person_eid)
    assert out.returncode == 0 and "<person>" in out.stdout and " add " in out.stdout


def test_bad_operations_get_a_4xx_and_change_nothing(cluster: Cluster) -> None:
    a = cluster.start("a", beacon=False)
    before = doc_xml(a.api)
    cases = [
        ("<add team='home'><person", "application/xml", 400, "malformed XML"),
        ("<remove team='home' person='99'/>", "application/xml", 422, "no person numbered or named '99'"),
        ("<set period='1' jam='1'><attribute name='colour'>red</attribute></set>", "application/xml", 422,
         "has no attribute 'colour'"),
        ('{"op": "set", "to": {"team": "visitors"}, "text": "x"}', "application/json", 400, "team must be one of"),
        # The second of two fails: neither is recorded.
        ('[{"op": "set", "to": {"path": "venue"}, "text": "Hall"}, {"op": "remove", "to": {"team": "home"}}]',
         "application/json", 422, "operation 2: <team> is part of every bout"),
    ]
    for text, ctype, status, message in cases:
        got, body = post_ops(a.api, text, ctype)
        assert (got, message in str(body.get("error"))) == (status, True), (text, got, body)
    assert doc_xml(a.api) == before
    assert get(a.api, "/api/v1/log/summary")["events"] == 0
    status, body = http(a.api, "/api/v1/doc/history?eid=6842b56c-44ca-525c-b89d-000000000000")
    assert status == 404 and "no element" in body["error"]
    status, body = http(a.api, "/api/v1/doc?format=yaml")
    assert status == 400
    out = huddle(a.api, "doc", "apply", "/nonexistent/ops.xml")
    assert out.returncode == 1 and "cannot read /nonexistent/ops.xml" in out.stderr


def test_the_document_survives_a_restart(cluster: Cluster, tmp_path: Path) -> None:
    a = cluster.start("a", beacon=False, data_dir=tmp_path / "a")
    status, _ = post_ops(a.api, '<set path="venue"><attribute name="name">Hall 7</attribute></set>', "text/xml")
    assert status == 201
    before = doc_xml(a.api)
    a.signal(15)
    assert a.wait() == 0
    again = cluster.start("a2", beacon=False, data_dir=tmp_path / "a")
    assert doc_xml(again.api) == before and 'name="Hall 7"' in before


@pytest.mark.timeout(420)
def test_the_demo_shows_the_mesh_chat_document_posts_guests_picture_and_audit(tmp_path: Path) -> None:
    """The whole demo, ending with the audit pipeline on Spark local[*] over the nodes' own logs."""
    if not os.environ.get("JAVA_HOME") and shutil.which("java") is None:
        pytest.skip("no Java 17+ for Spark (scripts/system-deps installs openjdk-17-jre-headless)")
    out = subprocess.run([sys.executable, "-m", "huddle", "demo", "--report-dir", str(tmp_path / "audit")],
                         capture_output=True, text=True, timeout=400, check=False)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "full mesh formed." in out.stdout
    assert "<alice> hello from alice" in out.stdout
    assert '<penalty code="B" number="7" team="away"/>' in out.stdout
    assert "what jam are we on? active: period 1 jam 1" in out.stdout
    # the simulated bout: five devices on alice and bob, the final score read at carol, then the audit's bout job
    assert "scorekeeper-home on bob" in out.stdout and "0 refused by the bout's rules" in out.stdout
    final = re.search(r"final score, from GET /api/v1/bout/summary at carol \(it recorded nothing\): "
                      r"Rainy City Rollers (\d+) - (\d+) Steel Valley Vixens; 6 jams, \d+ penalties; final, signed by Nia Soh",
                      out.stdout)
    assert final, out.stdout
    assert "the same summary on all 3 nodes" in out.stdout
    assert "cross-role conflicts flagged to the head NSO (GET /api/v1/bout/conflicts): 0" in out.stdout  # roles kept
    assert "carol's copy is byte for byte the same" in out.stdout
    assert 'scoreboard heard scorekeeper say \'score\': {"points": 4, "team": "home"}' in out.stdout
    assert "the same digest on all 3 nodes" in out.stdout
    assert "flaky crashed (exit 3) and its policy (restart = on-failure) restarted it: running, restarts 1" \
        in out.stdout
    assert "$ huddle app logs flaky --node bob   (at alice)" in out.stdout
    assert "carol's system picture: bob's scoreboard is stopped" in out.stdout
    assert "Traceback" not in out.stdout + out.stderr
    assert "all stopped, exit codes [0, 0, 0]" in out.stdout
    audit = out.stdout.split("== the audit")[1]
    assert "converged: every node holds every event and the same document" in audit
    assert "worst lag: receiver" in audit and "p99 delay" in audit
    assert re.search(r"input: \d+ rows from 3 node\(s\) in 1 group\(s\), \d+ distinct events", audit)
    report = tmp_path / "audit" / "report.html"
    assert f"report: {report}" in audit and "Converged" in report.read_text()
    assert f"bout (demo): Rainy City Rollers {final[1]} - {final[2]} Steel Valley Vixens, 6 jams" in audit
    bout = json.loads((tmp_path / "audit" / "bout-demo.json").read_text())
    assert (bout["teams"]["home"]["score"], bout["teams"]["away"]["score"]) == (int(final[1]), int(final[2]))
    assert f"the bout's final document: {tmp_path / 'audit' / 'bout-demo.xml'}" in audit
    book = tmp_path / "audit" / "statsbook.xlsx"  # the WFTDA statsbook from the replayed logs
    assert f"the statsbook: {book}" in audit
    import openpyxl

    assert openpyxl.load_workbook(book)["IGRF"]["B11"].value == "Rainy City Rollers"


@pytest.mark.timeout(300)
def test_the_demo_without_java_says_how_to_get_it_and_still_succeeds(tmp_path: Path) -> None:
    env = os.environ | {"JAVA_HOME": str(tmp_path / "no-java")}  # Spark's Java is JAVA_HOME's when it is set
    out = subprocess.run([sys.executable, "-m", "huddle", "demo", "--nodes", "2", "--report-dir", str(tmp_path / "a")],
                         capture_output=True, text=True, timeout=280, check=False, env=env)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "all stopped, exit codes [0, 0]" in out.stdout
    # Apps: bob's flaky crashed once and was restarted; scoreboard stopped from alice, bob's picture shows it.
    assert "flaky crashed (exit 3) and its policy (restart = on-failure) restarted it: running, restarts 1" \
        in out.stdout
    assert "flaky: crashing on purpose (exit 3)" in out.stdout
    assert re.search(r"stop: scoreboard +(stopping|stopped) ", out.stdout)
    assert "bob's system picture: bob's scoreboard is stopped" in out.stdout
    assert re.search(r"mesh security: group mode, group key [0-9a-f]{8}, \d+ connections refused", out.stdout)
    audit = out.stdout.split("== the audit")[1]
    assert "skipped: the pipeline runs on Apache Spark, which needs Java 17 or newer" in audit
    assert "apt-get install openjdk-17-jre-headless" in audit and "scripts/system-deps" in audit
    assert not (tmp_path / "a").exists()


def test_starting_and_stopping_jams_over_the_api(cluster: Cluster) -> None:
    a = cluster.start("a", beacon=False)
    status, body = http(a.api, "/api/v1/bout/stop", method="POST")
    assert (status, body["error"]) == (409, "no jam is being skated")
    status, body = http(a.api, "/api/v1/bout/start", method="POST")
    assert status == 201 and body["active"]["jam"] == 1 and body["upcoming"] is None
    status, body = http(a.api, "/api/v1/bout/start", method="POST")
    assert (status, body["error"]) == (409, "period 1 jam 1 is being skated: stop it first")
    status, body = http(a.api, "/api/v1/bout/stop", method="POST")
    assert status == 201 and body["active"] is None and body["upcoming"] == {"period": 1, "jam": 2}
    assert body["just_completed"]["duration"] >= 0
    with urllib.request.urlopen(a.api + "/bout", timeout=10) as resp:
        page = resp.read().decode()
    assert resp.headers["Content-Type"].startswith("text/html") and "/api/v1/bout/jams" in page
