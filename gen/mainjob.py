"""The main job: what ``python -m gen`` runs with no arguments."""


def run(args) -> int:
    raise NotImplementedError
