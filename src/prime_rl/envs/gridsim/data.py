"""ERCOT day-ahead hub prices: the packaged 2021-2024 file (the default), or ERCOT's own NP4-180-ER files.

The package ships the five hubs' hourly day-ahead prices of 2021-2024 as a compact file derived from ERCOT's
report NP4-180-ER (`ercot_data/README.md`; `load_packaged`). It holds exactly what `load_ercot` parses from the
four yearly workbooks (same days, same order, same prices to the cent; a test compares them where the files are
present), so GridSim's splits and every recorded score are the same either way. Other years or settlement
points: point `load_ercot` at a folder of the workbooks.

Format (ERCOT report NP4-180-ER on ercot.com): `DAMLZHBSPP_<year>.xlsx`, one sheet a month, columns `Delivery Date`
(MM/DD/YYYY), `Hour Ending` (`01:00`..`24:00`), `Repeated Hour Flag` (`Y` on the repeated autumn hour),
`Settlement Point`, `Settlement Point Price` ($/MWh). Clock-change days (23 or 25 hours) are dropped.

The parsed prices are cached as an `.npz` (no pickle) under `$PRIME_RL_CACHE` or `~/.cache/prime-rl/gridsim`, keyed
by the files' names, sizes and mtimes and the points asked for: a second load takes a few milliseconds.
"""

from __future__ import annotations

import datetime as dt
import hashlib
import json
import os
import tempfile
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

import numpy as np

HUBS = ("HB_HOUSTON", "HB_NORTH", "HB_SOUTH", "HB_WEST", "HB_BUSAVG")
FILE_GLOB = "DAMLZHBSPP_*.xlsx"
_PARSER_VERSION = 1
PACKAGED = Path(__file__).parent / "ercot_data" / "ercot_hubs_da_2021_2024.npz"
PACKAGED_YEARS = (2021, 2024)
_COMPACT_FORMAT = 1
_COLUMNS = ("Delivery Date", "Hour Ending", "Repeated Hour Flag", "Settlement Point", "Settlement Point Price")


@dataclass
class PriceTable:
    """Days of hourly prices: `dates[i]` (ISO `YYYY-MM-DD`), `points[i]`, `prices[i]` ((24,) $/MWh).

    `dropped` = (date, point) pairs dropped as clock-change days (23 or 25 hours) or incomplete.
    """

    dates: np.ndarray  # (N,) str
    points: np.ndarray  # (N,) str
    prices: np.ndarray  # (N, 24) float64
    dropped: np.ndarray  # (M,) str "date point hours"

    def __len__(self) -> int:
        return len(self.dates)


def default_cache_dir() -> Path:
    """`$PRIME_RL_CACHE/gridsim`, else `$XDG_CACHE_HOME/prime-rl/gridsim`, else `~/.cache/prime-rl/gridsim`."""
    if os.environ.get("PRIME_RL_CACHE"):
        return Path(os.environ["PRIME_RL_CACHE"]) / "gridsim"
    base = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache")
    return base / "prime-rl" / "gridsim"


def ercot_files(data_dir: str | Path) -> list[Path]:
    """The NP4-180-ER files in `data_dir`, sorted. Raises FileNotFoundError when there are none."""
    folder = Path(data_dir).expanduser()
    if not folder.is_dir():
        raise FileNotFoundError(
            f"ERCOT data folder {folder} does not exist: give a folder of {FILE_GLOB} files (--data-dir on the command "
            f"line, data_dir in a config), or leave it unset for the packaged 2021-2024 days"
        )
    files = sorted(folder.glob(FILE_GLOB))
    if not files:
        raise FileNotFoundError(f"no {FILE_GLOB} files in {folder}; download report NP4-180-ER from ercot.com")
    return files


def _cache_key(files: list[Path], points: tuple[str, ...]) -> str:
    digest = hashlib.sha256(json.dumps([_PARSER_VERSION, list(points)]).encode())
    for path in files:
        st = path.stat()
        digest.update(f"{path.resolve()}|{st.st_size}|{st.st_mtime_ns}".encode())
    return digest.hexdigest()[:24]


def _iso_date(value: object, where: str) -> str:
    if isinstance(value, dt.datetime):
        return value.date().isoformat()
    if isinstance(value, dt.date):
        return value.isoformat()
    try:
        return dt.datetime.strptime(str(value).strip(), "%m/%d/%Y").date().isoformat()
    except ValueError:
        raise ValueError(f"{where}: Delivery Date {value!r} is not MM/DD/YYYY") from None


def _hour(value: object, where: str) -> int:
    if isinstance(value, dt.time):
        return value.hour or 24
    text = str(value).strip()
    try:
        hour = int(text.split(":")[0])
    except ValueError:
        raise ValueError(f"{where}: Hour Ending {value!r} is not HH:00") from None
    if not 1 <= hour <= 24:
        raise ValueError(f"{where}: Hour Ending {value!r} outside 01:00..24:00")
    return hour


def parse_file(path: Path, points: tuple[str, ...]) -> dict[tuple[str, str], list[tuple[int, bool, float]]]:
    """Rows of one workbook for `points`: {(iso date, point): [(hour ending, repeated, price), ...]}.

    Raises:
        ValueError: a sheet lacks a needed column, or a cell cannot be read (names file, sheet and row).
        MissingExtraError: python-calamine is not installed (`pip install 'prime-rl[gridsim]'`).
    """
    from prime_rl.extras import require

    CalamineWorkbook = require("python_calamine", "gridsim", "reading ERCOT's xlsx files").CalamineWorkbook

    out: dict[tuple[str, str], list[tuple[int, bool, float]]] = defaultdict(list)
    wanted = set(points)
    wb = CalamineWorkbook.from_path(str(path))
    for sheet in wb.sheet_names:
        rows = wb.get_sheet_by_name(sheet).to_python()
        if not rows:
            continue
        header = [str(c).strip() for c in rows[0]]
        missing = [c for c in _COLUMNS if c not in header]
        if missing:
            raise ValueError(f"{path.name} sheet {sheet}: missing column(s) {missing}; is this an NP4-180-ER file?")
        i_date, i_hour, i_rep, i_pt, i_price = (header.index(c) for c in _COLUMNS)
        for row_no, row in enumerate(rows[1:], start=2):
            if row[i_pt] not in wanted:
                continue
            where = f"{path.name} sheet {sheet} row {row_no}"
            try:
                price = float(row[i_price])
            except (TypeError, ValueError):
                raise ValueError(f"{where}: Settlement Point Price {row[i_price]!r} is not a number") from None
            rep = str(row[i_rep]).strip().upper() == "Y"
            out[(_iso_date(row[i_date], where), row[i_pt])].append((_hour(row[i_hour], where), rep, price))
    return out


def _build(files: list[Path], points: tuple[str, ...]) -> PriceTable:
    merged: dict[tuple[str, str], list[tuple[int, bool, float]]] = defaultdict(list)
    for path in files:
        for key, hours_of in parse_file(path, points).items():
            merged[key].extend(hours_of)
    dates, pts, prices, dropped = [], [], [], []
    for date, point in sorted(merged):
        rows = merged[(date, point)]
        hours = sorted(h for h, rep, _ in rows if not rep)
        if len(rows) != 24 or any(rep for _, rep, _ in rows) or hours != list(range(1, 25)):
            dropped.append(f"{date} {point} {len(rows)}")
            continue
        day = np.empty(24)
        for hour, _, price in rows:
            day[hour - 1] = price
        dates.append(date)
        pts.append(point)
        prices.append(day)
    return PriceTable(
        dates=np.array(dates, dtype="U10"),
        points=np.array(pts, dtype="U16"),
        prices=np.array(prices, dtype=np.float64).reshape(-1, 24),
        dropped=np.array(dropped, dtype="U40"),
    )


def load_ercot(
    data_dir: str | Path, points: tuple[str, ...] = HUBS, cache_dir: str | Path | None = None, use_cache: bool = True
) -> PriceTable:
    """Load (date, point) days of hourly prices from the NP4-180-ER files in `data_dir`, using the parse cache.

    Clock-change days (23 or 25 hours) and incomplete days are dropped (listed in `PriceTable.dropped`).
    An unwritable cache dir only costs speed (the parse is ~2 s for four years).

    Raises:
        FileNotFoundError: no such dir or no files in it. ValueError: malformed file (names file/sheet/row).
    """
    files = ercot_files(data_dir)
    points = tuple(points)
    cache = Path(cache_dir) if cache_dir is not None else default_cache_dir()
    path = cache / f"ercot-{_cache_key(files, points)}.npz"
    if use_cache and path.is_file():
        try:
            with np.load(path, allow_pickle=False) as npz:
                return PriceTable(npz["dates"], npz["points"], npz["prices"], npz["dropped"])
        except (OSError, ValueError, KeyError):
            pass  # corrupt cache: rebuild below
    table = _build(files, points)
    if use_cache:
        try:
            cache.mkdir(parents=True, exist_ok=True)
            fd, tmp = tempfile.mkstemp(dir=cache, suffix=".npz.tmp")
            with os.fdopen(fd, "wb") as fh:
                np.savez(fh, dates=table.dates, points=table.points, prices=table.prices, dropped=table.dropped)
            os.replace(tmp, path)
        except OSError:
            pass
    return table


def save_compact(table: PriceTable, path: str | Path, source: str = "") -> Path:
    """Write `table` as a compact `.npz` (no pickle): prices as int32 cents, dates as days since 1970-01-01,
    points as indices into a list of names, the dropped days as text. Written atomically.

    Raises:
        ValueError: a price is not a whole number of cents or does not fit int32 (the file would not read back
            equal), or the table holds more than 255 points.
    """
    cents = np.round(table.prices * 100.0)
    if not np.array_equal(cents / 100.0, table.prices) or np.abs(cents).max(initial=0) >= 2**31:
        raise ValueError("prices must be whole cents within int32 to be stored exactly")
    names, point_idx = np.unique(table.points, return_inverse=True)
    if len(names) > 255:
        raise ValueError(f"{len(names)} points; the compact file stores at most 255")
    days = (table.dates.astype("datetime64[D]") - np.datetime64("1970-01-01", "D")).astype(np.int32)
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".npz.tmp")
    with os.fdopen(fd, "wb") as fh:
        np.savez_compressed(
            fh,
            format=np.int32(_COMPACT_FORMAT),
            day=days,
            point=point_idx.astype(np.uint8),
            point_names=names.astype("U16"),
            cents=cents.astype(np.int32),
            dropped=table.dropped.astype("U40"),
            source=np.array(source),
        )
    os.replace(tmp, path)
    return path


def load_compact(path: str | Path, points: tuple[str, ...] = HUBS) -> PriceTable:
    """Read a file written by `save_compact`, keeping the rows of `points` (in the file's order).

    Raises:
        FileNotFoundError: no such file. ValueError: an unknown format, or a point the file does not hold.
    """
    with np.load(Path(path), allow_pickle=False) as npz:
        if int(npz["format"]) != _COMPACT_FORMAT:
            raise ValueError(f"{path}: compact price file format {int(npz['format'])}, expected {_COMPACT_FORMAT}")
        names = npz["point_names"]
        missing = sorted(set(points) - set(names.tolist()))
        if missing:
            raise ValueError(
                f"{path} holds the points {names.tolist()}, not {missing}; give a folder of ERCOT's "
                f"{FILE_GLOB} files (data_dir / --data-dir) for other settlement points"
            )
        pts = names[npz["point"]]
        keep = np.isin(pts, list(points))
        dates = (np.datetime64("1970-01-01", "D") + npz["day"].astype("timedelta64[D]")).astype("U10")
        dropped = npz["dropped"]
        dropped = dropped[np.isin([d.split()[1] for d in dropped.tolist()], list(points))] if len(dropped) else dropped
        return PriceTable(
            dates=dates[keep],
            points=pts[keep].astype("U16"),
            prices=npz["cents"][keep].astype(np.float64) / 100.0,
            dropped=dropped.astype("U40"),
        )


def load_packaged(points: tuple[str, ...] = HUBS) -> PriceTable:
    """The five hubs' hourly day-ahead prices of 2021-2024 shipped with prime-rl (see `ercot_data/README.md`).

    Raises:
        ValueError: a point other than the five hubs (give `data_dir` for those).
    """
    return load_compact(PACKAGED, tuple(points))
