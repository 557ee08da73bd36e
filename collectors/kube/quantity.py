"""Kubernetes resource quantities ("3500m", "16Gi", "1e3") as floats: pure."""

from __future__ import annotations

_SUFFIX = {
    "n": 1e-9, "u": 1e-6, "m": 1e-3, "": 1.0, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12, "P": 1e15, "E": 1e18,
    "Ki": 2.0 ** 10, "Mi": 2.0 ** 20, "Gi": 2.0 ** 30, "Ti": 2.0 ** 40, "Pi": 2.0 ** 50, "Ei": 2.0 ** 60,
}


def parse_quantity(value: object) -> float | None:
    """A quantity as a number (cores, bytes, devices); None when it is not one (never 0 for junk)."""
    if isinstance(value, bool):
        return None
    if isinstance(value, (int, float)):
        return float(value)
    if not isinstance(value, str):
        return None
    text = value.strip()
    if not text:
        return None
    for width in (2, 1):
        suffix = text[-width:]
        if len(text) > width and suffix in _SUFFIX and not suffix.isdigit():
            try:
                return float(text[:-width]) * _SUFFIX[suffix]
            except ValueError:
                return None
    try:
        return float(text)  # plain numbers and decimal exponents ("1e3")
    except ValueError:
        return None


def format_amount(resource: str, amount: float) -> str:
    """An amount in the resource's usual unit: memory in GiB, CPUs and devices as counts."""
    if "memory" in resource.lower() or "storage" in resource.lower():
        return f"{amount / 2 ** 30:.3g}Gi"
    if amount == int(amount):
        return str(int(amount))
    return f"{amount:.3g}"
