"""The execution viewer, as `onceflow executions` and `onceflow show` use it.

records (local execution records), history (an execution's history read as the console
reads it), executions (listing and finding, locally or on a deployed stack), trace (the
path through the graph), layout and svg (the graph drawn), page (the HTML page, its CSS
and JavaScript in static/), text (the terminal's tables).
"""

from onceflow.view.executions import (
    OUTPUTS,
    STATUSES,
    definition,
    find_deployed,
    list_deployed,
    list_local,
    newest_stack,
)
from onceflow.view.page import html_path, write_page
from onceflow.view.text import render_table, terminal

__all__ = [
    "OUTPUTS",
    "STATUSES",
    "definition",
    "find_deployed",
    "html_path",
    "list_deployed",
    "list_local",
    "newest_stack",
    "render_table",
    "terminal",
    "write_page",
]
