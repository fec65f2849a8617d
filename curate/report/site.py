"""The report's building blocks: HTML (escaping, the page shell with inline CSS and JS, tables, filters) and the
files beside the pages (thumbnails, copied plots) with the seeded, bounded reads of records that pages show.

Pages are plain HTML rendered here; the only script (inline) filters rows and
cards on the client by reason, source and free text. Nothing is loaded from the
network: styles and script are inline, images are files beside the pages.
"""

from __future__ import annotations

import hashlib
import html
import shlex
import shutil
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from curate.core.images import ImageError, decode
from curate.core.records import BadRecord, expand_inputs, read_part, split_file



CSS = """
*{box-sizing:border-box}body{font:14px/1.45 system-ui,-apple-system,"Segoe UI",sans-serif;margin:0;color:#1d2329;
background:#f6f7f9}header{background:#1f3a5f;color:#fff;padding:10px 24px}header a{color:#cfe0ff;margin-right:14px}
header h1{font-size:18px;margin:4px 0}main{padding:16px 24px;max-width:1400px}section{background:#fff;
border:1px solid #dde1e6;border-radius:6px;padding:12px 16px;margin:0 0 16px}h2{font-size:16px;margin:4px 0 10px}
h3{font-size:14px;margin:10px 0 6px}table{border-collapse:collapse;font-size:13px}td,th{border-bottom:1px solid
#e5e8ec;padding:3px 8px;text-align:left;vertical-align:top}th{background:#f0f2f5}td.n,th.n{text-align:right;
font-variant-numeric:tabular-nums}.muted{color:#66707a}.ok{color:#1b7f3b}.bad{color:#b42318}.pill{display:inline-block;
padding:0 6px;border-radius:9px;background:#eef1f5;margin:1px 2px;font-size:12px}.bar{display:flex;height:22px;
border-radius:3px;overflow:hidden;min-width:300px;max-width:900px;margin:6px 0}.bar span{display:block;height:100%}
.kept{background:#3b8c5a}.dropped{background:#e0a526}.errored{background:#c4432d}.cards{display:flex;flex-wrap:wrap;
gap:10px}.card{border:1px solid #dde1e6;border-radius:6px;padding:8px;width:300px;background:#fff}.card.wide{width:100%}
.card img{max-width:256px;max-height:256px;display:block;margin:0 auto 6px;background:#eee}.pair{display:grid;
grid-template-columns:1fr 1fr;gap:8px}.pair div{background:#f7f8fa;padding:6px;border-radius:4px;white-space:pre-wrap;
word-break:break-word}.filters{margin:6px 0 10px;display:flex;gap:8px;flex-wrap:wrap}.filters input,.filters select{
font:inherit;padding:2px 6px}.strip{display:flex;height:26px;margin:3px 0;border:1px solid #ccd;border-radius:3px;
overflow:hidden;background:#fafafa}.strip span{display:flex;height:100%;overflow:hidden;font-size:10px;color:#fff;
align-items:center;white-space:nowrap;border-right:1px solid #fff}.seg-text{background:#4c78a8}.seg-image{
background:#9467bd}.seg-pad{background:#d9d9d9 !important;color:#555 !important}pre{white-space:pre-wrap;
word-break:break-word;margin:2px 0;font-size:12px;background:#f7f8fa;padding:4px}img.plot{max-width:100%;
border:1px solid #e5e8ec}.hidden{display:none !important}
"""

JS = """
(function(){
  function apply(box){
    var scope=document.getElementById(box.getAttribute('data-for'));
    var q=(box.querySelector('input')||{value:''}).value.toLowerCase();
    var sels=box.querySelectorAll('select');var shown=0;
    scope.querySelectorAll('[data-row]').forEach(function(el){
      var ok=!q||el.textContent.toLowerCase().indexOf(q)>=0;
      sels.forEach(function(s){if(s.value&&el.getAttribute('data-'+s.name)!==s.value){ok=false;}});
      el.classList.toggle('hidden',!ok);if(ok){shown++;}
    });
    var c=box.querySelector('.count');if(c){c.textContent=shown+' shown';}
  }
  window.addEventListener('load',function(){
    document.querySelectorAll('img').forEach(function(i){
      i.setAttribute('data-loaded',i.complete&&i.naturalWidth>0?i.naturalWidth+'x'+i.naturalHeight:'no');});
    document.body.setAttribute('data-ready','1');
  });
  var preset={};  // page.html#reason=empty&q=cat presets the filters (links can be shared)
  location.hash.replace(/^#/,'').split('&').forEach(function(kv){
    var i=kv.indexOf('=');if(i>0){preset[decodeURIComponent(kv.slice(0,i))]=decodeURIComponent(kv.slice(i+1));}});
  document.querySelectorAll('.filters').forEach(function(box){
    box.querySelectorAll('input,select').forEach(function(el){
      var key=el.tagName==='INPUT'?'q':el.name;
      if(preset[key]!==undefined){el.value=preset[key];}
      el.addEventListener('input',function(){apply(box);});});
    apply(box);
  });
})();
"""


def _visible(code: int) -> str:
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


#: Characters that would act rather than show, as visible escapes (``\\u202e``, ``\\x00``): control characters
#: but tab and line breaks, the bidi controls (a right-to-left override makes ``evil\\u202egpj.exe`` display
#: as ``evilexe.jpg``), zero-width spaces and lone surrogates (which no UTF-8 page can hold).
INVISIBLE = {c: _visible(c) for c in [*range(0x20), 0x7F, *range(0x80, 0xA0), 0x061C, 0x180E, 0x200B, 0x200E, 0x200F,
                                      *range(0x2028, 0x202F), 0x2060, *range(0x2066, 0x206A), 0xFEFF,
                                      *range(0xD800, 0xE000)] if c not in (0x09, 0x0A, 0x0D)}


def esc(value: Any) -> str:
    """HTML-escape any value (None as an empty string); characters that could spoof how it displays (controls,
    bidi overrides, zero-width spaces) are shown as escapes (:data:`INVISIBLE`)."""
    return "" if value is None else html.escape(str(value).translate(INVISIBLE), quote=True)


def num(value: Any) -> str:
    """A number for display: integers with thousands separators, floats with 3 decimals."""
    if value is None:
        return "–"
    if isinstance(value, bool):
        return str(value)
    if isinstance(value, int):
        return f"{value:,}"
    if isinstance(value, float):
        return f"{value:,.3f}"
    return esc(value)


def page(title: str, body: str, nav: list[tuple[str, str]]) -> str:
    """A complete HTML page with inline CSS and the filter script."""
    links = "".join(f'<a href="{esc(href)}">{esc(label)}</a>' for label, href in nav)
    return (f'<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8"><meta name="viewport" '
            f'content="width=device-width, initial-scale=1"><title>{esc(title)}</title><style>{CSS}</style></head>'
            f'<body><header><nav>{links}</nav><h1>{esc(title)}</h1></header><main>{body}</main>'
            f'<script>{JS}</script></body></html>\n')


def section(title: str, inner: str, sid: str = "") -> str:
    """A titled box."""
    attr = f' id="{esc(sid)}"' if sid else ""
    return f"<section{attr}><h2>{esc(title)}</h2>{inner}</section>"


def table(headers: list[str], rows: list[list[Any]], *, numeric: set[int] | None = None,
          row_attrs: list[dict[str, str]] | None = None, tid: str = "") -> str:
    """A table; cells are escaped unless they are :class:`Raw`."""
    numeric = numeric or set()
    head = "".join(f'<th{" class=n" if i in numeric else ""}>{esc(h)}</th>' for i, h in enumerate(headers))
    body = []
    for r, row in enumerate(rows):
        attrs = "".join(f' data-{k}="{esc(v)}"' for k, v in (row_attrs[r] if row_attrs else {}).items())
        cells = "".join(f'<td{" class=n" if i in numeric else ""}>{c if isinstance(c, Raw) else num(c)}</td>'
                        for i, c in enumerate(row))
        body.append(f"<tr{attrs}>{cells}</tr>")
    attr = f' id="{esc(tid)}"' if tid else ""
    return f"<table{attr}><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table>"


class Raw(str):
    """Markup that :func:`table` must not escape."""


def filters(target: str, selects: dict[str, list[str]], placeholder: str = "search") -> str:
    """Client-side filter controls for the ``[data-row]`` elements inside element ``target``."""
    parts = [f'<div class="filters" data-for="{esc(target)}"><input type="search" placeholder="{esc(placeholder)}">']
    for name, values in selects.items():
        opts = "".join(f'<option value="{esc(v)}">{esc(v)}</option>' for v in values)
        parts.append(f'<select name="{esc(name)}"><option value="">all {esc(name)}{"es" if name.endswith("s") else "s"}</option>{opts}</select>')
    parts.append('<span class="count muted"></span></div>')
    return "".join(parts)


# Files beside the pages: thumbnails (JPEG, at most 256 px), copied plots, and a bounded record lookup.
THUMB_PX = 256


class Assets:
    """Writes thumbnails and plots under ``REPORT/assets/`` and returns their page-relative paths."""

    def __init__(self, report: Path) -> None:
        self.root = report / "assets"
        self.root.mkdir(parents=True, exist_ok=True)
        self.thumbs = 0
        self.failed = 0

    def thumb(self, image: Any) -> str | None:
        """A ≤256 px JPEG thumbnail of an image (path or bytes); None when it cannot be decoded."""
        if image is None:
            return None
        data = image if isinstance(image, bytes) else str(image).encode("utf-8")
        name = f"t-{hashlib.sha1(data).hexdigest()[:16]}.jpg"
        path = self.root / name
        if not path.exists():
            try:
                img = decode(image if isinstance(image, bytes) else str(image))
            except ImageError:
                self.failed += 1
                return None
            img.thumbnail((THUMB_PX, THUMB_PX))
            tmp = path.with_suffix(".tmp")
            img.save(tmp, "JPEG", quality=80, optimize=True)
            tmp.replace(path)
            self.thumbs += 1
        return f"assets/{name}"

    def copy(self, src: Path, prefix: str) -> str | None:
        """Copy a plot next to the pages; None when it does not exist."""
        if not src.exists():
            return None
        name = f"{prefix}-{src.name}"
        shutil.copyfile(src, self.root / name)
        return f"assets/{name}"


def sample_indices(n: int, k: int, seed: int, salt: int = 0) -> list[int]:
    """``k`` of ``range(n)`` drawn with ``seed`` (sorted); all of them when ``n <= k``."""
    if n <= k:
        return list(range(n))
    rng = np.random.default_rng([seed, salt])
    return sorted(int(i) for i in rng.choice(n, size=k, replace=False))


#: Tables up to this many rows are read whole; larger ones through a seeded choice of row groups.
FULL_READ_ROWS = 1_000_000


def read_sampled(path: Path, columns: list[str] | None, seed: int, *,
                 max_rows: int | None = None) -> tuple[pa.Table, int, bool]:
    """A Parquet table, or for a large one a seeded choice of whole row groups holding about ``max_rows`` rows.

    Returns:
        (table, rows in the file, whether the table is a sample of row groups).
    """
    pf = pq.ParquetFile(path)
    total = pf.metadata.num_rows
    max_rows = max_rows or FULL_READ_ROWS
    if total <= max_rows or pf.num_row_groups <= 1:
        return pf.read(columns=columns), total, False
    return pf.read_row_groups(chosen_groups(pf, seed, max_rows), columns=columns), total, True


def chosen_groups(pf: pq.ParquetFile, seed: int, max_rows: int | None = None) -> list[int]:
    """The row groups :func:`read_sampled` reads from a large file (seeded, sorted)."""
    max_rows = max_rows or FULL_READ_ROWS
    sizes = [pf.metadata.row_group(g).num_rows for g in range(pf.num_row_groups)]
    order = np.random.default_rng([seed, 7]).permutation(len(sizes))
    chosen, rows = [], 0
    for g in order:
        chosen.append(int(g))
        rows += sizes[g]
        if rows >= max_rows:
            break
    return sorted(chosen)


def lookup_records(inputs: Sequence[str], ids: Iterable[str] | None = None, *,
                   max_rows: int = 200_000) -> dict[str, dict[str, Any]]:
    """Canonical records of the inputs by id: those in ``ids`` (or all), reading at most ``max_rows`` rows.

    The bound keeps a report on a large run fast: records beyond it are shown without
    their image or text.
    """
    wanted = None if ids is None else set(ids)
    found: dict[str, dict[str, Any]] = {}
    rows = 0
    try:
        paths = expand_inputs(list(inputs))
    except Exception:  # noqa: BLE001 - inputs moved or removed since the run: show what the outputs hold
        return found
    for path in paths:
        try:
            parts = split_file(path, 1 << 62)
        except Exception:  # noqa: BLE001
            continue
        for part in parts:
            for rec in read_part(part):
                rows += 1
                if not isinstance(rec, BadRecord) and (wanted is None or rec["id"] in wanted):
                    found.setdefault(rec["id"], rec)
                if rows >= max_rows or (wanted is not None and len(found) >= len(wanted)):
                    return found
    return found


def inputs_of(stats: dict[str, Any], verb: str) -> list[str]:
    """The record inputs of a stage: ``inputs`` in its ``stats.json``, else the positional arguments after the verb
    on its command line."""
    if isinstance(stats.get("inputs"), list):
        return [str(p) for p in stats["inputs"]]
    try:
        argv = shlex.split(stats.get("command", ""))
    except ValueError:
        return []
    if verb not in argv:
        return []
    out, skip = [], False
    for arg in argv[argv.index(verb) + 1:]:
        if skip:
            skip = False
        elif arg.startswith("--"):
            skip = "=" not in arg
        else:
            out.append(arg)
    return out


def image_html(assets: Assets, image: Any, alt: str = "") -> str:
    """An ``<img>`` of a record's image (its thumbnail), or a note that it could not be read."""
    src = assets.thumb(image)
    if src is None:
        return '<div class="muted">(image not readable)</div>'
    return f'<img src="{esc(src)}" alt="{esc(alt)}">'
