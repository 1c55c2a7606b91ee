"""The one offline HTML page shape every report writes: no external resource, and a script that
records on <body data-images-loaded="ok/total"> whether every figure loaded (the tests read it)."""

from __future__ import annotations

import html
from importlib.metadata import PackageNotFoundError, version

IMAGES_SCRIPT = ("window.addEventListener('load',function(){var im=document.images,ok=0;"
                 "for(var i=0;i<im.length;i++){if(im[i].complete&&im[i].naturalWidth>0)ok++;}"
                 "document.body.setAttribute('data-images-loaded',ok+'/'+im.length);});")


def lengen_version() -> str:
    try:
        return version("lengen")
    except PackageNotFoundError:
        return "unknown"


def style(*rules: str) -> str:
    """The pages' style sheet, with a report's own `rules` (which columns align left)."""
    return ("body{font-family:sans-serif;max-width:1200px;margin:2em auto;padding:0 1em}"
            "table{border-collapse:collapse;margin:1em 0;font-size:13px}"
            "td,th{border:1px solid #ccc;padding:3px 6px;text-align:right}"
            + "".join(rules) + "img{max-width:100%}pre{background:#f6f6f6;padding:1em}")


def opening(name: str, done: int, planned: int, folder_label: str, folder) -> list[str]:
    """The page's heading and first line: how many runs finished, a folder, lengen's version."""
    return [f"<h1>lengen report: {html.escape(name)}</h1>",
            f"<p>{done} of {planned} runs finished. {folder_label} <code>{html.escape(str(folder))}</code>; "
            f"lengen {html.escape(lengen_version())}.</p>"]


def document(name: str, parts: list[str], css: str, spec_text: str) -> str:
    """The page titled `lengen report: name` holding the HTML fragments `parts`, then the sweep
    file."""
    parts = [*parts, "<h2>The sweep file</h2>", f"<pre>{html.escape(spec_text or '')}</pre>"]
    return (f"<!DOCTYPE html><html><head><meta charset=\"utf-8\"><title>lengen report: {html.escape(name)}</title>"
            f"<style>{css}</style></head><body>{''.join(parts)}<script>{IMAGES_SCRIPT}</script></body></html>\n")
