"""One blueprint `bp` per page area; `jobdesk.dashboard.web` nests them under the parent."""
