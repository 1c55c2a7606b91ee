"""The one offline HTML page shape every report writes: no external resource, and a script that
records on <body data-images-loaded="ok/total"> whether every figure loaded (the tests read it)."""

from __future__ import annotations

import html

IMAGES_SCRIPT = ("window.addEventListener('load',function(){var im=document.images,ok=0;"
                 "for(var i=0;i<im.length;i++){if(im[i].complete&&im[i].naturalWidth>0)ok++;}"
                 "document.body.setAttribute('data-images-loaded',ok+'/'+im.length);});")


def lengen_version() -> str:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("lengen")
    except PackageNotFoundError:
        return "unknown"


def document(name: str, parts: list[str], style: str) -> str:
    """The page titled `lengen report: name` holding the HTML fragments `parts`."""
    return (f"<!DOCTYPE html><html><head><meta charset=\"utf-8\"><title>lengen report: {html.escape(name)}</title>"
            f"<style>{style}</style></head><body>{''.join(parts)}<script>{IMAGES_SCRIPT}</script></body></html>\n")
