"""Reading a bundle: `gdv evidence show` (terminal) and `gdv evidence report` (one static,
self-contained HTML page: inline CSS and script, nothing fetched)."""

from __future__ import annotations

import difflib
import html
import json
from collections import Counter
from pathlib import Path

from gdv.evidence.signing import SIGNATURE_FILE


def _signature_state(root: Path) -> str:
    return "signed (manifest.sig)" if (root / SIGNATURE_FILE).is_file() else "unsigned"


def show(root: Path, manifest: dict) -> str:
    """A terminal summary of the bundle."""
    lines = [
        f"bundle:      {root}",
        f"source:      {manifest['source']['file']}  sha256 {manifest['source']['sha256'][:16]}",
        f"target:      {manifest['target']['name']}",
        f"verdict:     {manifest['verdict']}",
        f"signature:   {_signature_state(root)}",
        f"pipeline:    -O{manifest['pipeline']['level']}"
        + (" --fast-math" if manifest["pipeline"]["fast_math"] else "")
        + (" --reassociate" if manifest["pipeline"].get("reassociate") else ""),
        "stages:",
    ]
    lines += [f"  {s['file']}  ({s['theory']})" for s in manifest["stages"]]
    by_pass: dict[str, Counter] = {}
    for o in manifest["obligations"]:
        by_pass.setdefault(o["pass"], Counter())[o["status"]] += 1
    width = max([len(p) for p in by_pass] + [4])
    lines.append(f"obligations: {len(manifest['obligations'])}")
    lines.append(f"  {'pass':<{width}}  proved  refuted  unknown")
    for name, c in by_pass.items():
        lines.append(f"  {name:<{width}}  {c['proved']:>6}  {c['refuted']:>7}  {c['unknown']:>7}")
    for o in manifest["obligations"]:
        if o["status"] != "proved":
            lines.append(f"  {o['status']}: {o['id']}: {o['reason']}")
            cex = o["counterexample"]
            if cex:
                lines.append(
                    f"    example: output {cex['output']} at {cex['index']}: src {cex['src']}, "
                    f"tgt {cex['tgt']} ({cex['origin']})"
                )
    bounds = manifest["bounds"]
    if bounds["status"] == "available":
        for b in bounds["outputs"]:
            shown = "unbounded" if b["abs"] is None else f"{b['abs']:.3g}"
            lines.append(f"bound:       {b['name']}: |error| <= {shown}  ({b['expr']})")
    else:
        lines.append(f"bounds:      unavailable: {bounds['reason']}")
    conf = manifest["conformance"]
    seeds = [r["seed"] for r in conf["results"]]
    lines.append(f"conformance: {conf['status']} on seeds {seeds} ({conf['backend']})")
    for f in manifest["artifact"]["files"]:
        lines.append(f"artifact:    {f['file']}  ({manifest['artifact']['kind']})")
    return "\n".join(lines) + "\n"


_CSS = """
body{font:14px/1.4 system-ui,sans-serif;margin:2em;color:#222}
h1{font-size:1.4em}h2{font-size:1.15em;margin-top:1.6em;border-bottom:1px solid #ccc}
table{border-collapse:collapse}td,th{border:1px solid #ccc;padding:2px 6px;text-align:left;
vertical-align:top}pre{background:#f6f6f6;padding:6px;overflow-x:auto;font-size:12px}
.proved{color:#060}.refuted{color:#b00;font-weight:bold}.unknown{color:#a60;font-weight:bold}
.add{background:#e6ffe6}.del{background:#ffe6e6}.hunk{color:#66a}
"""

_SCRIPT = """
(function () {
  var rows = Array.prototype.slice.call(document.querySelectorAll('#obligations tbody tr'));
  var selects = Array.prototype.slice.call(document.querySelectorAll('select[data-filter]'));
  function apply() {
    var shown = 0;
    rows.forEach(function (row) {
      var keep = selects.every(function (s) {
        return !s.value || row.getAttribute('data-' + s.dataset.filter) === s.value;
      });
      row.hidden = !keep;
      if (keep) { shown += 1; }
    });
    document.getElementById('shown').textContent = shown + ' of ' + rows.length + ' shown';
  }
  selects.forEach(function (s) {
    var key = s.dataset.filter;
    var values = Array.from(new Set(rows.map(function (r) {
      return r.getAttribute('data-' + key);
    }))).sort();
    values.forEach(function (v) {
      var o = document.createElement('option');
      o.value = v;
      o.textContent = v;
      s.appendChild(o);
    });
    s.addEventListener('change', apply);
  });
  apply();
  document.documentElement.setAttribute('data-ready', '1');
})();
"""


def _e(text: object) -> str:
    return html.escape(str(text), quote=True)


def _diff(before: str, after: str, a: str, b: str) -> str:
    out = []
    for line in difflib.unified_diff(
        before.splitlines(), after.splitlines(), a, b, lineterm="", n=2
    ):
        cls = {"+": "add", "-": "del", "@": "hunk"}.get(line[:1], "")
        if line.startswith(("+++", "---")):
            cls = "hunk"
        out.append(f'<span class="{cls}">{_e(line)}</span>' if cls else _e(line))
    return "\n".join(out) or "(no change)"


def render_html(root: Path, manifest: dict) -> str:
    """The review page of the bundle in `root`."""
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        # Any script error is written into the page, where a reviewer (or a test) sees it.
        "<script>window.onerror=function(m){document.documentElement.setAttribute("
        "'data-js-error',String(m));};</script>",
        f"<title>gdv evidence: {_e(manifest['source']['file'])}</title>",
        f"<style>{_CSS}</style></head><body>",
        f"<h1>gdv evidence: {_e(manifest['source']['file'])}</h1>",
        "<table>",
    ]
    summary = [
        ("verdict", f'<span class="{_e(manifest["verdict"])}">{_e(manifest["verdict"])}</span>'),
        ("source sha256", _e(manifest["source"]["sha256"])),
        ("target", _e(manifest["target"]["name"])),
        ("signature", _e(_signature_state(root))),
        ("tools", _e(", ".join(f"{k} {v}" for k, v in sorted(manifest["tools"].items())))),
        ("schema", _e(manifest["schema_version"])),
    ]
    parts += [f"<tr><th>{k}</th><td>{v}</td></tr>" for k, v in summary]
    parts.append("</table>")
    parts += _pipeline(root, manifest)
    parts += _obligations(root, manifest)
    parts += _bounds(manifest)
    parts += _conformance(manifest)
    parts += _artifact(root, manifest)
    parts.append(f"<script>{_SCRIPT}</script></body></html>")
    return "\n".join(parts) + "\n"


def _read(root: Path, rel: str) -> str:
    try:
        return (root / rel).read_text()
    except (OSError, UnicodeDecodeError) as e:
        return f"(cannot read {rel}: {e})"


def _pipeline(root: Path, manifest: dict) -> list[str]:
    p = manifest["pipeline"]
    parts = [
        "<h2>Pipeline</h2>",
        f"<p>-O{_e(p['level'])}{' --fast-math' if p['fast_math'] else ''}"
        f"{' --reassociate' if p.get('reassociate') else ''}; passes: "
        f"{_e(', '.join(p['passes']))}</p>",
        '<ol id="stages">',
    ]
    prev = None
    for s in manifest["stages"]:
        text = _read(root, s["file"])
        parts.append(
            f"<li><details><summary>{_e(s['pass'])} <code>{_e(s['file'])}</code> "
            f"({_e(s['theory'])})</summary>"
        )
        if prev is not None:
            diff = _diff(prev[0], text, prev[1], s["file"])
            parts.append(f"<p>diff from the previous stage</p><pre>{diff}</pre>")
        parts.append(f"<p>IR</p><pre>{_e(text)}</pre></details></li>")
        prev = (text, s["file"])
    parts.append("</ol>")
    return parts


def _obligations(root: Path, manifest: dict) -> list[str]:
    parts = [
        "<h2>Obligations</h2>",
        '<p>status <select data-filter="status"><option value="">all</option></select> '
        'pass <select data-filter="pass"><option value="">all</option></select> '
        'theory <select data-filter="theory"><option value="">all</option></select> '
        '<span id="shown"></span></p>',
        '<table id="obligations"><thead><tr><th>id</th><th>kind</th><th>theory</th>'
        "<th>status</th><th>claim</th><th>assumptions</th><th>solver</th><th>queries</th>"
        "</tr></thead><tbody>",
    ]
    for o in manifest["obligations"]:
        queries = "".join(
            f"<details><summary>{_e(q['file'])}</summary><pre>{_e(_read(root, q['file']))}"
            "</pre></details>"
            for q in o["queries"]
        )
        parts.append(
            f'<tr data-status="{_e(o["status"])}" data-pass="{_e(o["pass"])}" '
            f'data-theory="{_e(o["theory"])}"><td>{_e(o["id"])}</td><td>{_e(o["kind"])}</td>'
            f'<td>{_e(o["theory"])}</td><td class="{_e(o["status"])}">{_e(o["status"])}</td>'
            f"<td>{_e(o['claim'])}</td><td>{_e('; '.join(o['assumptions']))}</td>"
            f"<td>{_e(o['solver']['name'])} {_e(o['solver']['version'])}</td>"
            f"<td>{queries}</td></tr>"
        )
    parts.append("</tbody></table>")
    cexs = [o for o in manifest["obligations"] if o["counterexample"]]
    parts.append("<h2>Counterexamples</h2>")
    if not cexs:
        parts.append("<p>none</p>")
    for o in cexs:
        parts.append(
            f"<h3>{_e(o['id'])}</h3><pre>{_e(json.dumps(o['counterexample'], indent=2))}</pre>"
        )
    return parts


def _bounds(manifest: dict) -> list[str]:
    b = manifest["bounds"]
    parts = ["<h2>Error bounds</h2>"]
    if b["status"] != "available":
        return parts + [f"<p>unavailable: {_e(b['reason'])}</p>"]
    parts.append(
        "<table><tr><th>output</th><th>type</th><th>|error| bound</th><th>symbolic</th>"
        "<th>interval</th></tr>"
    )
    for o in b["outputs"]:
        shown = "unbounded" if o["abs"] is None else f"{o['abs']:.6g}"
        parts.append(
            f"<tr><td>{_e(o['name'])}</td><td>{_e(o['type'])}</td><td>{_e(shown)}</td>"
            f"<td><code>{_e(o['expr'])}</code></td><td>{_e(o.get('interval'))}</td></tr>"
        )
    parts.append("</table><ul>")
    parts += [f"<li>{_e(a)}</li>" for a in b["assumptions"]]
    return parts + ["</ul>"]


def _conformance(manifest: dict) -> list[str]:
    c = manifest["conformance"]
    parts = [
        "<h2>Conformance</h2>",
        f"<p>{_e(c['status'])} on the {_e(c['backend'])} backend {_e(c.get('reason', ''))}</p>",
        "<table><tr><th>seed</th><th>bit-exact</th></tr>",
    ]
    parts += [f"<tr><td>{r['seed']}</td><td>{r['bit_exact']}</td></tr>" for r in c["results"]]
    return parts + ["</table>"]


def _artifact(root: Path, manifest: dict) -> list[str]:
    a = manifest["artifact"]
    parts = ["<h2>Artifact</h2>", f"<p>{_e(a['kind'])}: {_e(a.get('description', ''))}</p>"]
    for f in a["files"]:
        parts.append(
            f"<details><summary><code>{_e(f['file'])}</code> sha256 {_e(f['sha256'])}</summary>"
            f"<pre>{_e(_read(root, f['file']))}</pre></details>"
        )
    return parts


def render_cross_target_html(root: Path, manifest: dict) -> str:
    """The review page of a cross-target bundle (`gdv.evidence.cross_target`): its targets and
    the cross-target table, targets by targets (each target's own compile has its own page:
    `gdv evidence report DIR/targets/NAME`)."""
    from gdv.evidence.cross_target import cell_text, table_rows

    title = f"gdv cross-target evidence: {_e(manifest['source']['file'])}"
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>{title}</title>",
        f"<style>{_CSS}</style></head><body>",
        f"<h1>{title}</h1>",
        "<table>",
    ]
    table = manifest["cross_target"]
    summary = [
        ("verdict", f'<span class="{_e(manifest["verdict"])}">{_e(manifest["verdict"])}</span>'),
        ("source sha256", _e(manifest["source"]["sha256"])),
        ("targets", _e(", ".join(t["name"] for t in manifest["targets"]))),
        ("cross-target", _e(f"{table['status']} on seeds {table['seeds']} {table['reason']}")),
        ("signature", _e(_signature_state(root))),
        ("tools", _e(", ".join(f"{k} {v}" for k, v in sorted(manifest["tools"].items())))),
        ("schema", _e(manifest["schema_version"])),
    ]
    parts += [f"<tr><th>{k}</th><td>{v}</td></tr>" for k, v in summary]
    parts.append("</table>")
    sides, cells = table_rows(manifest)
    parts += [
        "<h2>Cross-target table</h2>",
        "<p>Each target's final stage on its target and the source on the reference backend, "
        "on the recorded seeds: the verdict, the largest absolute difference and the largest "
        "distance in ulps over the outputs.</p>",
        '<table id="cross-target"><tr><th></th>'
        + "".join(f"<th>{_e(s)}</th>" for s in sides)
        + "</tr>",
    ]
    for a in sides:
        row = [f"<th>{_e(a)}</th>"]
        for b in sides:
            p = cells.get((a, b))
            text = "&mdash;" if a == b or p is None else _e(cell_text(p))
            row.append(f"<td>{text}</td>")
        parts.append("<tr>" + "".join(row) + "</tr>")
    parts += [
        "</table>",
        "<h2>Pairs</h2>",
        '<table id="pairs"><tr><th>a</th><th>b</th><th>required</th><th>output</th>'
        "<th>max |diff|</th><th>max ulp</th><th>limit</th><th>verdict</th></tr>",
    ]
    for p in table["pairs"]:
        for k, o in enumerate(p["outputs"]):
            limit = "" if p["limits"] is None else p["limits"][k]
            limit = "none" if limit is None else limit if limit == "" else f"{limit:.6g}"
            diff = "NaN mismatch" if o["max_abs_diff"] is None else f"{o['max_abs_diff']:.6g}"
            parts.append(
                f"<tr><td>{_e(p['a'])}</td><td>{_e(p['b'])}</td><td>{_e(p['required'])}</td>"
                f"<td>{k}</td><td>{_e(diff)}</td><td>{_e(o['max_ulp'])}</td>"
                f"<td>{_e(limit)}</td>"
                f"<td>{_e(p['verdict'])}</td></tr>"
            )
    parts.append("</table><h2>Targets</h2>")
    for t in manifest["targets"]:
        p = t["pipeline"]
        parts.append(
            f"<h3>{_e(t['name'])}</h3><p>bundle <code>{_e(t['bundle'])}/</code> (manifest "
            f"sha256 {_e(t['manifest_sha256'])}); {_e(t['obligations'])} obligation(s) "
            f'<span class="{_e(t["verdict"])}">{_e(t["verdict"])}</span>; -O{_e(p["level"])}; '
            f"{'keeps' if t['keeps_ir_order'] else 'changes'} IR order; passes: "
            f"{_e(', '.join(p['passes']))}</p>"
        )
        for f in t["artifact"]["files"]:
            parts.append(
                f"<details><summary><code>{_e(f['file'])}</code> ({_e(t['artifact']['kind'])}) "
                f"sha256 {_e(f['sha256'])}</summary><pre>{_e(_read(root, f['file']))}</pre>"
                "</details>"
            )
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"
