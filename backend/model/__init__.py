"""Model sources (Hub, git-lfs, local, tiny), preflight and validation without loading weights."""
