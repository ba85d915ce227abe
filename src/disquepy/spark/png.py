"""A tiny chart renderer writing PNG files with nothing but zlib.

The analytics need one readable chart; matplotlib is not a dependency of disquepy
(and would weigh more than the rest of the Spark extra), so this module draws on an
RGB canvas with a 5x7 bitmap font and encodes the PNG itself (RFC 2083: signature,
IHDR, one zlib-compressed IDAT with filter byte 0 per row, IEND, CRC-32 per chunk).
"""

from __future__ import annotations

import math
import struct
import zlib
from collections.abc import Sequence

Color = tuple[int, int, int]

WHITE: Color = (255, 255, 255)
BLACK: Color = (0, 0, 0)
GREY: Color = (200, 200, 200)
DARK: Color = (90, 90, 90)
PALETTE: list[Color] = [(31, 119, 180), (255, 127, 14), (44, 160, 44), (214, 39, 40),
                        (148, 103, 189), (140, 86, 75), (227, 119, 194), (23, 190, 207)]

# 5x7 glyphs, one string of 7 rows per character, '#' = ink (upper case only)
_FONT_SRC = {
    "0": " ### #   ##  ### # ###  ##   # ### ", "1": "  #   ##    #    #    #    #   ### ",
    "2": " ### #   #    #   #   #   #   #####", "3": "#####   #   #     #     ##   # ### ",
    "4": "   #   ##  # # #  # #####   #    # ", "5": "######    ####     #    ##   # ### ",
    "6": "  ##  #   #    #### #   ##   # ### ", "7": "#####    #   #   #   #    #    #   ",
    "8": " ### #   ##   # ### #   ##   # ### ", "9": " ### #   ##   # ####    #   #  ##  ",
    "A": " ### #   ##   #######   ##   ##   #", "B": "#### #   ##   ##### #   ##   ##### ",
    "C": " ### #   ##    #    #    #   # ### ", "D": "###  #  # #   ##   ##   ##  # ###  ",
    "E": "######    #    #### #    #    #####", "F": "######    #    #### #    #    #    ",
    "G": " ### #   ##    # ####   ##   # ####", "H": "#   ##   ##   #######   ##   ##   #",
    "I": " ###   #    #    #    #    #   ### ", "J": "  ###   #    #    #    # #  #  ##  ",
    "K": "#   ##  # # #  ##   # #  #  # #   #", "L": "#    #    #    #    #    #    #####",
    "M": "#   ### ### # ## # ##   ##   ##   #", "N": "#   ##   ###  ## # ##  ###   ##   #",
    "O": " ### #   ##   ##   ##   ##   # ### ", "P": "#### #   ##   ##### #    #    #    ",
    "Q": " ### #   ##   ##   ## # ##  #  ## #", "R": "#### #   ##   ##### # #  #  # #   #",
    "S": " #####    #     ###     #    ##### ", "T": "#####  #    #    #    #    #    #  ",
    "U": "#   ##   ##   ##   ##   ##   # ### ", "V": "#   ##   ##   ##   ##   # # #   #  ",
    "W": "#   ##   ##   ## # ## # ## # # # # ", "X": "#   ##   # # #   #   # # #   ##   #",
    "Y": "#   ##   # # #   #    #    #    #  ", "Z": "#####    #   #   #   #   #    #####",
    " ": "                                   ", ".": "                          ##   ##  ",
    ",": "                     ##   ##  #    ", ":": "     ##   ##        ##   ##        ",
    "-": "               ###                 ", "_": "                              #####",
    "/": "    #    #   #   #   #   #    #    ", "(": "   #   #   #    #    #     #     # ",
    ")": " #     #     #    #    #   #   #   ", "%": "##   ##  #   #   #   #   #  ##   ##",
    "=": "          #####     #####          ", "+": "       #    #  #####  #    #       ",
    "<": "   #   #   #   #     #     #     # ", ">": " #     #     #     #   #   #   #   ",
    "*": "       # # # # ### # # # #         ", "#": " # # ##### # # # # ##### # #       ",
    "?": " ### #   #    #   #   #         #  ", "'": "  #    #   #                       ",
}
_FONT = {ch: [[src[r * 5 + c] == "#" for c in range(5)] for r in range(7)]
         for ch, src in _FONT_SRC.items() if len(src) >= 35}


class Canvas:
    """An RGB raster with the few drawing primitives a chart needs."""

    def __init__(self, width: int, height: int, bg: Color = WHITE) -> None:
        self.w, self.h = width, height
        self.px = bytearray(bytes(bg) * (width * height))

    def set(self, x: int, y: int, c: Color) -> None:
        """Colour one pixel (ignored outside the canvas)."""
        if 0 <= x < self.w and 0 <= y < self.h:
            i = (y * self.w + x) * 3
            self.px[i:i + 3] = bytes(c)

    def rect(self, x0: int, y0: int, x1: int, y1: int, c: Color) -> None:
        """Fill the rectangle [x0, x1] x [y0, y1]."""
        x0, x1 = sorted((max(0, x0), min(self.w - 1, x1)))
        y0, y1 = sorted((max(0, y0), min(self.h - 1, y1)))
        row = bytes(c) * (x1 - x0 + 1)
        for y in range(y0, y1 + 1):
            i = (y * self.w + x0) * 3
            self.px[i:i + len(row)] = row

    def line(self, x0: int, y0: int, x1: int, y1: int, c: Color, width: int = 1) -> None:
        """A straight line (Bresenham), ``width`` pixels thick."""
        dx, dy = abs(x1 - x0), -abs(y1 - y0)
        sx, sy = (1 if x0 < x1 else -1), (1 if y0 < y1 else -1)
        err = dx + dy
        half = width // 2
        while True:
            if width == 1:
                self.set(x0, y0, c)
            else:
                self.rect(x0 - half, y0 - half, x0 + half, y0 + half, c)
            if x0 == x1 and y0 == y1:
                return
            e2 = 2 * err
            if e2 >= dy:
                err += dy
                x0 += sx
            if e2 <= dx:
                err += dx
                y0 += sy

    def text(self, x: int, y: int, s: str, c: Color = BLACK, scale: int = 1) -> int:
        """Draw ``s`` with its top-left corner at (x, y); returns the width drawn."""
        cx = x
        for ch in s.upper():
            glyph = _FONT.get(ch, _FONT["?"])
            for r, row in enumerate(glyph):
                for col, ink in enumerate(row):
                    if ink:
                        self.rect(cx + col * scale, y + r * scale,
                                  cx + col * scale + scale - 1, y + r * scale + scale - 1, c)
            cx += 6 * scale
        return cx - x

    def png(self) -> bytes:
        """The canvas as PNG bytes (8-bit RGB, no interlace)."""
        stride = self.w * 3
        raw = b"".join(b"\x00" + bytes(self.px[y * stride:(y + 1) * stride])
                       for y in range(self.h))

        def chunk(kind: bytes, data: bytes) -> bytes:
            return (struct.pack(">I", len(data)) + kind + data
                    + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF))

        ihdr = struct.pack(">IIBBBBB", self.w, self.h, 8, 2, 0, 0, 0)
        return (b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr)
                + chunk(b"IDAT", zlib.compress(raw, 6)) + chunk(b"IEND", b""))


def text_width(s: str, scale: int = 1) -> int:
    """Pixel width of ``s`` drawn by :meth:`Canvas.text`."""
    return 6 * scale * len(s)


def nice_ticks(lo: float, hi: float, n: int = 5) -> list[float]:
    """Round tick values covering [lo, hi]."""
    if hi <= lo:
        hi = lo + 1
    raw = (hi - lo) / n
    mag = 10 ** math.floor(math.log10(raw))
    step = min((m * mag for m in (1, 2, 2.5, 5, 10) if m * mag >= raw), default=mag * 10)
    start = math.floor(lo / step) * step
    out = []
    v = start
    while v <= hi + step * 0.5 and len(out) < 50:
        if v >= lo - 1e-9:
            out.append(round(v, 10))
        v += step
    return out


def fmt_num(v: float) -> str:
    """Short human form: 1.2K, 3.4M, 0.25."""
    a = abs(v)
    for div, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "K")):
        if a >= div:
            return f"{v / div:.3g}{suffix}"
    if a == 0 or a >= 1:
        return f"{v:.3g}"
    return f"{v:.2g}"


def line_panel(cv: Canvas, box: tuple[int, int, int, int], title: str, x_label: str,
               series: Sequence[tuple[str, Sequence[tuple[float, float]]]],
               x_fmt=fmt_num) -> None:
    """Line chart of several (name, [(x, y), ...]) series in ``box`` (x0, y0, x1, y1)."""
    x0, y0, x1, y1 = box
    cv.text(x0, y0, title, BLACK, 2)
    left, top, right, bottom = x0 + 60, y0 + 26, x1 - 10, y1 - 40
    pts = [p for _, s in series for p in s]
    xs = [p[0] for p in pts] or [0, 1]
    ys = [p[1] for p in pts] or [0, 1]
    xlo, xhi = min(xs), max(xs) if max(xs) > min(xs) else min(xs) + 1
    yticks = nice_ticks(0, max(ys) if max(ys) > 0 else 1)
    yhi = yticks[-1] if yticks[-1] > 0 else 1

    def px(x: float, y: float) -> tuple[int, int]:
        return (left + round((x - xlo) / (xhi - xlo) * (right - left)),
                bottom - round(y / yhi * (bottom - top)))

    for t in yticks:
        _, yy = px(xlo, t)
        cv.line(left, yy, right, yy, GREY)
        label = fmt_num(t)
        cv.text(left - 6 - text_width(label), yy - 3, label, DARK)
    for t in nice_ticks(xlo, xhi, 6):
        xx, _ = px(t, 0)
        cv.line(xx, bottom, xx, bottom + 4, DARK)
        label = x_fmt(t)
        cv.text(xx - text_width(label) // 2, bottom + 8, label, DARK)
    cv.line(left, top, left, bottom, BLACK)
    cv.line(left, bottom, right, bottom, BLACK)
    cv.text((left + right) // 2 - text_width(x_label) // 2, bottom + 22, x_label, DARK)
    lx = left + 10
    for i, (name, s) in enumerate(series):
        c = PALETTE[i % len(PALETTE)]
        prev = None
        for x, y in sorted(s):
            p = px(x, y)
            if prev is not None:
                cv.line(prev[0], prev[1], p[0], p[1], c, 2)
            else:
                cv.rect(p[0] - 1, p[1] - 1, p[0] + 1, p[1] + 1, c)
            prev = p
        cv.rect(lx, top + 4, lx + 10, top + 10, c)
        lx += 14 + cv.text(lx + 14, top + 4, name, BLACK) + 10


def bar_panel(cv: Canvas, box: tuple[int, int, int, int], title: str,
              groups: Sequence[tuple[str, Sequence[float]]], legend: Sequence[str],
              unit: str = "") -> None:
    """Grouped horizontal bars: one group per name, one bar per legend entry."""
    x0, y0, x1, y1 = box
    cv.text(x0, y0, title, BLACK, 2)
    label_w = max([text_width(n) for n, _ in groups] + [40]) + 10
    left, top, right, bottom = x0 + label_w, y0 + 40, x1 - 70, y1 - 10
    vmax = max([v for _, vs in groups for v in vs] + [1e-9])
    lx = left
    for i, name in enumerate(legend):
        c = PALETTE[i % len(PALETTE)]
        cv.rect(lx, y0 + 24, lx + 10, y0 + 30, c)
        lx += 14 + cv.text(lx + 14, y0 + 24, name, BLACK) + 12
    if not groups:
        cv.text(left, top + 10, "NO DATA", DARK)
        return
    per = max(8, (bottom - top) // len(groups))
    bar_h = max(3, (per - 6) // max(1, len(legend)))
    for gi, (name, values) in enumerate(groups):
        gy = top + gi * per
        cv.text(x0, gy + (per - 8) // 2, name, BLACK)
        for bi, v in enumerate(values):
            c = PALETTE[bi % len(PALETTE)]
            by = gy + bi * bar_h
            w = round(v / vmax * (right - left))
            cv.rect(left, by, left + max(1, w), by + bar_h - 2, c)
            cv.text(left + w + 4, by + max(0, (bar_h - 9) // 2), fmt_num(v) + unit, DARK)
    cv.line(left, top - 2, left, bottom, BLACK)
