"""The "Fixes tried" section that ``--try-fixes`` adds to a run directory's report.html: inside the
report's container and styled like its other sections, checked in headless Chromium."""

from __future__ import annotations

import json
import re
from pathlib import Path

from browser import load_page
from trial_records import record

from gpudoctor.core.trial_record import NotTried
from gpudoctor.pipeline import analyze_path
from gpudoctor.report.html import render_html
from gpudoctor.tryfix.attach import attach
from gpudoctor.tryfix.session import TrialsOutcome

DATA = Path(__file__).parent / "data"

RECORD = record(effects=("autocast",))

# run in the test's copy of the page only (a report page holds no script): what the browser computed,
# written into the DOM that --dump-dom returns
PROBE = """<script>
const facts = {};
for (const [name, sel] of [["tried", "#fixes-tried table"], ["kernels", "section table"]]) {
  const table = document.querySelector(sel), cell = table.querySelector("th");
  facts[name] = {inContainer: table.closest(".gpud") !== null, font: getComputedStyle(table).fontFamily,
                 collapse: getComputedStyle(table).borderCollapse, thBackground: getComputedStyle(cell).backgroundColor};
}
const probe = document.createElement("pre");
probe.id = "probe";
probe.textContent = JSON.stringify(facts);
document.body.appendChild(probe);
</script>"""


def test_fixes_tried_sits_in_the_styled_container(tmp_path: Path) -> None:
    (tmp_path / "report.html").write_text(
        render_html(analyze_path(DATA / "fp32_matmul")), encoding="utf-8"
    )
    not_tried = [NotTried("host-sync", "in the code")]
    attach(tmp_path, TrialsOutcome([RECORD], not_tried, note="one process per trial"))
    page = (tmp_path / "report.html").read_text(encoding="utf-8")
    assert page.rstrip().endswith("</html>") and page.count('<section id="fixes-tried">') == 1
    probed = tmp_path / "probed.html"
    probed.write_text(page.replace("</body>", PROBE + "\n</body>"), encoding="utf-8")
    result = load_page(probed)
    facts = json.loads(
        re.search(r'<pre id="probe">(.*?)</pre>', result.dom).group(1).replace("&quot;", '"')
    )
    tried, kernels = facts["tried"], facts["kernels"]
    assert tried["inContainer"] is True
    assert tried["font"].startswith("system-ui") and tried["font"].endswith(
        "sans-serif"
    )  # the report's, not serif
    assert (
        tried == kernels
    )  # the same font, collapsed borders and header shading as the report's other tables
    assert tried["collapse"] == "collapse"
