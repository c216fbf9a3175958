"""MkDocs hook: the results pages (a page per task, per paper's claims and per method), made
from the committed results when the site is built, so ``mkdocs build`` builds them with the
docs. The pages come from :func:`fedbench.leaderboard.site.site_pages` (nothing is written
into ``docs/``); this hook adds them, their plots and a "Results" entry to the navigation.
"""

from __future__ import annotations

from pathlib import Path

from mkdocs.structure.files import File

_PAGES: dict = {}
_ASSETS: dict = {}


def on_config(config):
    from fedbench.leaderboard.site import results_nav, site_pages

    repo = Path(config.config_file_path).resolve().parent
    pages, assets = site_pages(repo)
    _PAGES.clear()
    _PAGES.update(pages)
    _ASSETS.clear()
    _ASSETS.update(assets)
    nav = [item for item in config.nav if not (isinstance(item, dict) and "Results" in item)]
    at = next((i for i, item in enumerate(nav) if isinstance(item, dict) and "API reference" in item), len(nav))
    config.nav = nav[:at] + [{"Results": results_nav(pages)}] + nav[at:]
    return config


def on_files(files, config):
    for path, text in sorted(_PAGES.items()):
        files.append(File.generated(config, path, content=text))
    for path, source in sorted(_ASSETS.items()):
        files.append(File.generated(config, path, abs_src_path=str(source)))
    return files
