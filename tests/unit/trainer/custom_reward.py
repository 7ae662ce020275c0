"""A custom reward importable by path, for the custom-reward test."""


def length_bonus(completion: str, ground_truth: str, params: dict[str, str]) -> float:
    return len(completion) * float(params.get("scale", "1"))
