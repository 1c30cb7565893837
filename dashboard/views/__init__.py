"""One blueprint `bp` per page area; `dashboard.web` nests them under the parent."""
