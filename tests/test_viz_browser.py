"""The chunk-flow animation in a real browser: headless Chromium runs plotly.js, animates to a step,
and the page reports what plotly.js then shows (caption, cell shades, outlines, arrowheads)."""
import json
import re
import shutil
import subprocess

import numpy as np
import plotly.io as pio
import pytest

import labcore.sim as sim
from labcore.viz import captions, chunk_flow
from labcore.viz.chunk_flow import fill_levels

pytestmark = [pytest.mark.live, pytest.mark.browser]

CHROMIUM = next((shutil.which(b) for b in ("chromium", "chromium-browser", "google-chrome") if shutil.which(b)), None)

PAGE = """<html><body>{div}<pre id="out">pending</pre><script>
const gd = document.getElementById('flow'), out = document.getElementById('out');
window.onerror = (message) => {{ out.textContent = 'ERROR ' + message; }};
function report() {{
  const d = gd._fullData, n = d.length;
  out.textContent = JSON.stringify({{
    caption: d[n - 1].text[0], cells: Array.from(d[n - 3].marker.color),
    outline: [Array.from(d[n - 2].x), Array.from(d[n - 2].y)],
    heads: d.slice(3, n - 3).map(t => Array.from(t.marker.size).filter(s => s > 0).length)}});
}}
setTimeout(() => Plotly.animate(gd, ['{frame}'], {{mode: 'immediate', frame: {{duration: 0, redraw: false}},
                                                   transition: {{duration: 0}}}}), 300);
setTimeout(report, 2000);   // animate's promise waits for animation frames, which headless may not paint
</script></body></html>"""


@pytest.mark.skipif(CHROMIUM is None, reason="no Chromium on this machine: `apt-get install chromium` "
                                             "to run the real-browser animation test")
@pytest.mark.timeout(120)
def test_plotly_js_plays_a_frame(tmp_path):
    trace = sim.simulate("all_reduce", algorithm="ring", ranks=4, nbytes=4096)
    step = 2
    div = pio.to_html(chunk_flow(trace), include_plotlyjs=True, full_html=False, div_id="flow", auto_play=False)
    page = tmp_path / "flow.html"
    page.write_text(PAGE.format(div=div, frame=step))
    dom = subprocess.run([CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", f"--user-data-dir={tmp_path}",
                          "--virtual-time-budget=10000", "--dump-dom", page.as_uri()],
                         capture_output=True, text=True, timeout=90).stdout
    found = re.search(r'<pre id="out">(.*?)</pre>', dom, re.S)
    assert found and found.group(1).startswith("{"), (found.group(1) if found else dom[-2000:])
    shown = json.loads(found.group(1).replace("&lt;", "<").replace("&gt;", ">").replace("&amp;", "&"))
    assert shown["caption"].replace("<br>", " ").startswith(captions(trace)[step])
    counts, need = fill_levels(trace)
    assert np.allclose(shown["cells"], (counts[step + 1] / need).ravel())
    s = trace.schedule
    sl = s.step_slices()[step]
    assert sorted(zip(shown["outline"][1], shown["outline"][0])) == sorted(zip(s.dst[sl].tolist(), s.chunk[sl].tolist()))
    assert sum(shown["heads"]) == sl.stop - sl.start
