"""Wire primitives of the frame codec: varints, scalars, strings, bitmaps, byte planes, XOR, scaling."""

from __future__ import annotations

import math
import struct

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from telemetry.codec.errors import FrameError
from telemetry.codec.gorilla_xor import xor_decode, xor_encode
from telemetry.codec.planes import decode_signed, decode_words, encode_signed, encode_words, pack_bits, read_bits
from telemetry.codec.scaling import decimal_exponent, lossless_decimal, quantise_decimal, unscale_decimal
from telemetry.codec.wire import Reader, opt_string, scalar, svarint, unzigzag, zigzag

INT64 = st.integers(min_value=-(2**63), max_value=2**63 - 1)


def bits(x: float) -> bytes:
    return struct.pack("<d", x)


@given(st.integers())
def test_zigzag_round_trips_any_int(n: int) -> None:
    assert zigzag(n) >= 0
    assert unzigzag(zigzag(n)) == n


@given(INT64)
def test_svarint_round_trips_int64_in_at_most_ten_bytes(n: int) -> None:
    raw = svarint(n)
    assert len(raw) <= 10
    r = Reader(raw)
    assert r.svarint("x") == n
    assert r.remaining == 0


def test_uvarint_longer_than_ten_bytes_is_refused() -> None:
    with pytest.raises(FrameError, match="longer than 10 bytes"):
        Reader(b"\xff" * 11).uvarint("count")


def test_truncated_varint_names_what_and_where() -> None:
    with pytest.raises(FrameError) as info:
        Reader(b"\x00\x80", pos=1).uvarint("column length")
    assert "column length" in str(info.value)
    assert info.value.offset == 1


@given(st.one_of(st.none(), st.text()))
def test_opt_string_round_trips_including_lone_surrogates(value: str | None) -> None:
    assert Reader(opt_string(value)).opt_string("s") == value
    assert Reader(opt_string("\ud800x")).opt_string("s") == "\ud800x"


def test_opt_string_that_is_not_utf8_is_a_frame_error() -> None:
    with pytest.raises(FrameError, match="not UTF-8"):
        Reader(b"\x03\xff\xfe").opt_string("pod")


@given(st.one_of(st.none(), st.integers(min_value=-(2**300), max_value=2**300), st.floats()))
def test_scalar_round_trips_bit_for_bit(value: int | float | None) -> None:
    back = Reader(scalar(value)).scalar("v")
    assert type(back) is type(value)
    if isinstance(value, float):
        assert isinstance(back, float)
        assert bits(back) == bits(value)
    else:
        assert back == value


def test_scalar_refuses_what_is_not_a_number() -> None:
    with pytest.raises(ValueError, match="not a number"):
        scalar("12")


@given(st.lists(st.booleans(), max_size=100))
def test_bitmaps_round_trip_lsb_first(flags: list[bool]) -> None:
    raw = pack_bits(bytes(flags))
    assert len(raw) == (len(flags) + 7) // 8
    assert read_bits(Reader(raw), len(flags), "b") == "".join("1" if f else "0" for f in flags)


def test_bitmap_padding_bits_must_be_zero() -> None:
    with pytest.raises(FrameError, match="past position 3"):
        read_bits(Reader(b"\x08"), 3, "presence bitmap")


@given(st.lists(INT64, min_size=1, max_size=80))
def test_signed_residuals_round_trip(values: list[int]) -> None:
    changed, raw = encode_signed(values)
    r = Reader(raw)
    assert decode_signed(r, len(values), changed, "d") == values
    assert r.remaining == 0


@settings(max_examples=50)
@given(st.lists(st.sampled_from([0, 0, 0, 1, -1, 300, -70000, 2**40]), min_size=1, max_size=80))
def test_mostly_zero_residuals_use_the_changed_bitmap_when_smaller(values: list[int]) -> None:
    changed, raw = encode_signed(values)
    assert decode_signed(Reader(raw), len(values), changed, "d") == values
    if values.count(0) == len(values):
        assert raw == b"\x00"


def test_residual_wider_than_64_bits_is_refused_by_the_encoder() -> None:
    with pytest.raises(OverflowError):
        encode_signed([0, 2**63])


@given(st.lists(st.integers(min_value=0, max_value=2**64 - 1), min_size=1, max_size=40))
def test_words_round_trip(words: list[int]) -> None:
    raw = b"".join(w.to_bytes(8, "little") for w in words)
    changed, block = encode_words(raw, len(words))
    assert decode_words(Reader(block), len(words), changed, "w") == raw


@given(st.lists(st.floats(), min_size=1, max_size=70), st.floats())
def test_xor_round_trips_any_floats_bit_for_bit(values: list[float], base: float) -> None:
    base_bits = int.from_bytes(bits(base), "little")
    first, changed, block, last = xor_encode(values, base_bits)
    decoded, last_back = xor_decode(Reader(block), len(values), first, changed, base_bits)
    assert [bits(v) for v in decoded] == [bits(v) for v in values]
    assert last_back == last == int.from_bytes(bits(values[-1]), "little")


@given(st.integers(min_value=-(10**12), max_value=10**12), st.integers(min_value=0, max_value=6))
def test_decimals_are_found_and_come_back_exactly(k: int, e: int) -> None:
    value = k / 10**e
    found = lossless_decimal([value, value * 2], None)
    assert found is not None
    exponent, ks = found
    assert exponent <= e
    assert [bits(v) for v in unscale_decimal(ks, exponent)] == [bits(value), bits(value * 2)]


def test_negative_zero_tiny_and_huge_floats_are_not_decimals() -> None:
    assert lossless_decimal([0.0, -0.0], 0) is None
    assert lossless_decimal([1.0, 1e-30], None) is None
    assert lossless_decimal([2.0**70], None) is None
    assert decimal_exponent(0.1) == 1
    assert decimal_exponent(math.pi) == 15


@given(st.floats(min_value=-1e6, max_value=1e6), st.integers(min_value=0, max_value=6))
def test_quantised_values_come_back_within_half_a_quantum(value: float, e: int) -> None:
    back = unscale_decimal(quantise_decimal([value], e), e)[0]
    assert abs(back - value) <= 0.5 * 10.0**-e + 4 * math.ulp(value)
