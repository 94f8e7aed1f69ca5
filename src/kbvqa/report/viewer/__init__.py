"""The run viewer (`kbvqa view`): browse audits, composites, retrieval, predictions, agent episodes,
judge and IVR-12 verdicts in a browser, live (Starlette) or as an exported static site.

`discover` finds outputs by their manifests; `Site` renders pages over lazily built byte-offset
indexes; `create_app` serves them (kbvqa.report.viewer.app, needs the `view` extra) and
`export_site` writes them to a folder.
"""

from kbvqa.report.viewer.discovery import Catalog, Output, discover
from kbvqa.report.viewer.export import ExportResult, export_site
from kbvqa.report.viewer.site import Lookups, Site

__all__ = ["Catalog", "ExportResult", "Lookups", "Output", "Site", "discover", "export_site"]
