"""Resource quantities (`500m`, `1Gi`, `1e3`): parsing and the canonical form a real server stores.

A quantity field that does not parse makes the whole body undecodable on a real server
(400 BadRequest on create/update, 422 on a patch), so a bad value never reaches storage.
A good value is stored in canonical form: the same number, written with the largest
suffix of its format that keeps the mantissa an integer (`1000m` -> `1`, `1024Mi` -> `1Gi`,
`0.5` -> `500m`). Values are exact (fractions), rounded up to the nano unit as the server does.
"""

from __future__ import annotations

import re
from fractions import Fraction
from math import ceil

__all__ = ["QuantityError", "parse", "canonical", "FORMAT_WRONG", "SUFFIX_WRONG"]

FORMAT_WRONG = "quantities must match the regular expression '^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$'"
SUFFIX_WRONG = "unable to parse quantity's suffix"

# The shape every quantity must have before its suffix is even looked at.
_SHAPE = re.compile(r"^([+-]?[0-9.]+)([eEinumkKMGTP]*[-+]?[0-9]*)$")
_NUMBER = re.compile(r"^[+-]?(?:[0-9]+\.?[0-9]*|\.[0-9]*)$")
_EXPONENT = re.compile(r"^[eE]([+-]?[0-9]+)$")

_DECIMAL = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
_BINARY = {"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50, "Ei": 60}
_DECIMAL_BY_EXP = {v: k for k, v in _DECIMAL.items()}
_BINARY_SUFFIXES = ("", "Ki", "Mi", "Gi", "Ti", "Pi", "Ei")
_NANO = Fraction(1, 10**9)


class QuantityError(ValueError):
    """A value that is not a quantity; the message is the real server's wording."""


def parse(text: str | int | float) -> tuple[Fraction, str]:
    """`(value, format)` with format `DecimalSI`, `BinarySI` or `DecimalExponent`."""
    if isinstance(text, bool):
        raise QuantityError(FORMAT_WRONG)
    if isinstance(text, (int, float)):
        text = repr(text) if isinstance(text, float) else str(text)
    text = text.strip()
    shape = _SHAPE.match(text)
    if shape is None:
        raise QuantityError(FORMAT_WRONG)
    number, suffix = shape.group(1), shape.group(2)
    if not _NUMBER.match(number):
        raise QuantityError(FORMAT_WRONG)
    value = _fraction(number)
    if suffix in _DECIMAL:
        value, fmt = value * Fraction(10) ** _DECIMAL[suffix], "DecimalSI"
    elif suffix in _BINARY:
        value, fmt = value * 2 ** _BINARY[suffix], "BinarySI"
    else:
        exp = _EXPONENT.match(suffix)
        if exp is None:
            raise QuantityError(SUFFIX_WRONG)
        value, fmt = value * Fraction(10) ** int(exp.group(1)), "DecimalExponent"
    return _round_up_to_nano(value), fmt


def _fraction(number: str) -> Fraction:
    sign = -1 if number.startswith("-") else 1
    digits = number.lstrip("+-")
    whole, _, frac = digits.partition(".")
    value = Fraction(int(whole or "0"))
    if frac:
        value += Fraction(int(frac), 10 ** len(frac))
    return sign * value


def _round_up_to_nano(value: Fraction) -> Fraction:
    scaled = value / _NANO
    return value if scaled.denominator == 1 else Fraction(ceil(scaled)) * _NANO


def canonical(text: str | int | float) -> str:
    """The string a real server stores and returns for this quantity."""
    value, fmt = parse(text)
    if value == 0:
        return "0"
    sign, magnitude = ("-", -value) if value < 0 else ("", value)
    if fmt == "BinarySI" and magnitude >= 1024 and magnitude.denominator == 1:
        return sign + _binary(int(magnitude))
    mantissa, exp = _decimal(magnitude)
    if fmt == "DecimalExponent":
        return f"{sign}{mantissa}" + (f"e{exp}" if exp else "")
    return f"{sign}{mantissa}{_DECIMAL_BY_EXP[exp]}"


def _binary(n: int) -> str:
    power = 0
    while power < len(_BINARY_SUFFIXES) - 1 and n % 1024 == 0:
        n //= 1024
        power += 1
    return f"{n}{_BINARY_SUFFIXES[power]}"


def _decimal(magnitude: Fraction) -> tuple[int, int]:
    """The integer mantissa with the largest exponent (a multiple of 3, -9..18) that keeps it whole."""
    for exp in range(18, -10, -3):
        scaled = magnitude / Fraction(10) ** exp
        if scaled.denominator == 1:
            return int(scaled), exp
    return int(magnitude / _NANO), -9  # unreachable: values are whole nanos
