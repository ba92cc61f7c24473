"""Search: a one-word query over 1,000,000 messages and 10,000 memory records, vs ``LIKE``.

The data folder is built once into ``.bench-cache/search-v<schema>-<index>-<count>-<records>/`` (as the history
corpus is: the server's own migrations and seeding, then raw ``executemany``) and reused while
its row counts are right. Bodies are ~300 bytes drawn from a Zipf-distributed vocabulary of
20,000 made-up English words and 3,000 Chinese words, a third of the messages in Chinese, so a
word's share of the messages ranges from most of them to a handful, as in real chat. The
messages are then indexed with :func:`room.store.indexer.catch_up` (what the server's indexer
does) and the records with :func:`room.store.search.index_record`.

Query words are picked by the share of messages they occur in (read from the index itself,
``fts5vocab``): about 0.01 %, 0.1 % and 1 % of the messages, and a two-character Chinese
bigram. Server-side time is :func:`room.store.search.search` on a read connection made like the
server's reader threads: parsing, the ranked query, the authors and the snippets of the best
20. The reference, in the same run on the same data, is what search would be without an index:
``LIKE '%word%'`` over the messages and records of the project, the newest 20 matches (it cannot
rank). The ``indexing`` workload compares durable sends with and without message indexing.
"""

from __future__ import annotations

import random
import shutil
import sqlite3
import time
import zlib
from itertools import accumulate
from pathlib import Path

from benchlib.corpus import PROJECT_ID, make_data_folder
from benchlib.serverproc import RoomServer
from benchlib.stats import Row, quantiles
from room.store import indexer
from room.store import search as search_store
from room.store.migrate import connect
from room.store.schema import SCHEMA_VERSION, SEARCH

WORKLOAD = "search"
LIMIT = 20
BODY_CHARS = 300
CHINESE_SHARE = 1 / 3
RECORD_KINDS = ("fact", "convention", "progress", "session", "reference", "decision")
# (label, share of the messages a query word occurs in); the target applies to the middle one.
BANDS = (
    ("rare word (~0.01 %)", 0.0001),
    ("one word (~0.1 %)", 0.001),
    ("common word (~1 %)", 0.01),
)
TARGET_BAND = "one word (~0.1 %)"

_SYLLABLES = [
    "ka",
    "to",
    "ri",
    "ne",
    "mo",
    "sa",
    "lu",
    "pe",
    "di",
    "vo",
    "ga",
    "ze",
    "ha",
    "bi",
    "ru",
    "no",
    "te",
    "mi",
    "ko",
    "ya",
    "ra",
    "ke",
    "su",
    "po",
    "li",
    "da",
    "fe",
    "wa",
    "ti",
    "go",
    "re",
    "na",
    "be",
    "so",
    "ju",
    "me",
    "ki",
    "ta",
    "ho",
    "ne",
    "ci",
    "ra",
    "ve",
    "ny",
]
_HAN = (
    "的一是在不了有和人这中大为上个国我以要他时来用们生到作地于出就分对成会可主发年动同工也能下过子说产种面"
    "而方后多定行学法所民得经十三之进着等部度家电力里如水化高自二理起小物现实加量都两体制机当使点从业本去把性"
    "好应开它合还因由其些然前外天政四日那社义事平形相全表间样与关各重新线内数正心反你明看原又么利比或但质气第"
    "向道命此变条只没结解问意建月公无系军很情者最立代想已通并提直题党程展五果料象员革位入常文总次品式活设及管"
    "特件长求老头基资边流路级少图山统接知较将组见计别她手角期根论运农指几九区强放决西被干做必战先回则任取据处"
    "队南给色光门即保治北造百规热领七海口东导器压志世金增争济阶油思术极交受联什认六共权收证改清己美再采转更单"
    "风切打白教速花带安场身车例真务具万每目至达走积示议声报斗完类八离华名确才科张信马节话米整空元况今集温传土"
    "许步群广石记需段研界拉林律叫且究观越织装影算低持音众书布复容儿须际商非验连断深难近矿千周委素技备半办青省"
    "列习响约支般史感劳便团往酸历市克何除消构府称太准精值号率族维划选标写存候毛亲快效斯院查江型眼王按格养易置"
)


def _zipf_cum(n: int, s: float = 1.05) -> list[float]:
    return list(accumulate(1.0 / (rank**s) for rank in range(1, n + 1)))


def _vocabularies(rng: random.Random) -> tuple[list[str], list[str]]:
    english: set[str] = set()
    while len(english) < 20_000:
        english.add("".join(rng.choices(_SYLLABLES, k=rng.randint(2, 4))))
    chinese: set[str] = set()
    while len(chinese) < 3_000:
        chinese.add("".join(rng.choices(_HAN, k=rng.choice((2, 2, 2, 3, 4)))))
    return sorted(english, key=lambda _: rng.random()), sorted(chinese, key=lambda _: rng.random())


class _Text:
    def __init__(self, seed: int) -> None:
        self.rng = random.Random(seed)
        self.english, self.chinese = _vocabularies(self.rng)
        self.en_cum = _zipf_cum(len(self.english))
        self.zh_cum = _zipf_cum(len(self.chinese))

    def body(self) -> str:
        rng = self.rng
        if rng.random() < CHINESE_SHARE:
            words = rng.choices(self.chinese, cum_weights=self.zh_cum, k=BODY_CHARS // 7)
            text = "".join(w + ("，" if rng.random() < 0.15 else "") for w in words)
            return text[: BODY_CHARS // 3]  # ~300 bytes of UTF-8
        words = rng.choices(self.english, cum_weights=self.en_cum, k=BODY_CHARS // 7)
        return " ".join(words)[:BODY_CHARS]


def _counts(db: Path) -> tuple[int, int]:
    conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True)
    try:
        messages = conn.execute(
            "SELECT count(*) FROM messages WHERE project_id = ?", (PROJECT_ID,)
        ).fetchone()[0]
        records = conn.execute("SELECT count(*) FROM search_records").fetchone()[0]
        return int(messages), int(records)
    except sqlite3.Error:
        return 0, 0
    finally:
        conn.close()


def index_records(
    conn: sqlite3.Connection, records: int, author: int, now: float, text: _Text
) -> None:
    """``records`` memory records of the bench's project, indexed as the store does
    (:func:`room.store.search.index_record`), inside the caller's transaction."""
    for i in range(records):
        search_store.index_record(
            conn, project_id=PROJECT_ID, record_id=i + 1, kind=RECORD_KINDS[i % 6],
            author_id=author, at=now - i, text=text.body(),
        )  # fmt: skip


def optimize_records(conn: sqlite3.Connection) -> None:
    """The records' FTS5 index merged into one segment, the WAL folded in."""
    conn.execute("INSERT INTO search_fts (search_fts) VALUES ('optimize')")
    conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")


def index_messages(db: Path) -> None:
    """Every message of ``db`` indexed by the server's own indexer
    (:func:`room.store.indexer.catch_up`), its FTS5 index merged, the WAL folded in."""
    indexer.catch_up(db)
    ix = indexer.open_index(db)
    try:
        ix.execute("INSERT INTO message_fts (message_fts) VALUES ('optimize')")
        ix.execute("PRAGMA wal_checkpoint(TRUNCATE)")
    finally:
        ix.close()


def ensure_corpus(cache: Path, count: int, records: int) -> Path:
    """The cached data folder with ``count`` indexed messages and ``records`` records."""
    # Named after the index's schema too: a changed index is built afresh.
    index = zlib.crc32((SEARCH + "".join(search_store.INDEX_SCHEMA)).encode())
    data = cache / f"search-v{SCHEMA_VERSION}-{index:08x}-{count}-{records}"
    db = data / "room.sqlite"
    if db.exists() and _counts(db) == (count, records):
        return data
    shutil.rmtree(data, ignore_errors=True)
    print(f"  building the {count:,}-message search corpus in {data} (once) …", flush=True)
    t0 = time.monotonic()
    owner, lead = make_data_folder(data)
    text = _Text(23)
    conn = connect(db, synchronous="OFF")
    conn.execute("PRAGMA cache_size = -262144")
    try:
        first = int(conn.execute("SELECT coalesce(max(id), 0) + 1 FROM messages").fetchone()[0])
        head = int(conn.execute("SELECT last_seq FROM projects WHERE id = 1").fetchone()[0])
        now = time.time()
        chunk = 20_000
        for start in range(0, count, chunk):
            n = min(chunk, count - start)
            rows = [
                (first + start + i, PROJECT_ID, head + start + i + 1,
                 owner if i % 3 else lead, text.body(), now - (count - start - i) * 0.5)
                for i in range(n)
            ]  # fmt: skip
            conn.execute("BEGIN IMMEDIATE")
            conn.executemany(
                "INSERT INTO messages (id, project_id, seq, author_id, kind, body, frame,"
                " created_at) VALUES (?, ?, ?, ?, 'chat', ?, '{}', ?)",
                rows,
            )
            conn.execute("COMMIT")
        conn.execute("UPDATE projects SET last_seq = ? WHERE id = 1", (head + count,))
        t1 = time.monotonic()
        conn.execute("BEGIN IMMEDIATE")
        index_records(conn, records, lead, now, text)
        conn.execute("COMMIT")
        optimize_records(conn)
    finally:
        conn.close()
    index_messages(db)
    print(
        f"  built in {time.monotonic() - t0:.0f} s (indexing {time.monotonic() - t1:.0f} s)",
        flush=True,
    )
    return data


def _pick_words(conn: sqlite3.Connection, count: int, rng: random.Random) -> dict[str, list[str]]:
    """Per band, up to 20 index terms whose document count is near the band's share."""
    conn.execute("CREATE VIRTUAL TABLE IF NOT EXISTS temp.v USING fts5vocab(ix, message_fts, row)")
    picked: dict[str, list[str]] = {}
    for label, share in BANDS:
        target = max(2, int(count * share))
        rows = conn.execute(
            "SELECT term FROM temp.v WHERE doc BETWEEN :lo AND :hi AND term GLOB '[a-z]*'",
            {"lo": int(target * 0.8), "hi": int(target * 1.25)},
        ).fetchall()
        picked[label] = rng.sample([r[0] for r in rows], min(20, len(rows)))
    rows = conn.execute(
        "SELECT term, doc FROM temp.v WHERE length(term) = 2 AND term >= '一' AND doc BETWEEN"
        " :lo AND :hi",
        {"lo": int(count * 0.0008), "hi": int(count * 0.0013)},
    ).fetchall()
    picked["Chinese bigram inside words (~0.1 %)"] = rng.sample(
        [r[0] for r in rows], min(20, len(rows))
    )
    return picked


def _fts_ms(conn: sqlite3.Connection, words: list[str], samples: int) -> list[float]:
    out = []
    for i in range(samples):
        word = words[i % len(words)]
        conn.execute("BEGIN")
        t0 = time.perf_counter_ns()
        found = search_store.search(conn, PROJECT_ID, word, limit=LIMIT)
        out.append((time.perf_counter_ns() - t0) / 1e6)
        conn.execute("COMMIT")
        assert found["results"], word
    return out


def _like_ms(conn: sqlite3.Connection, words: list[str], samples: int) -> list[float]:
    out = []
    for i in range(samples):
        pattern = f"%{words[i % len(words)]}%"
        t0 = time.perf_counter_ns()
        conn.execute(
            "SELECT id, body FROM messages WHERE project_id = :p AND deleted_at IS NULL"
            " AND body LIKE :w ORDER BY id DESC LIMIT :n",
            {"p": PROJECT_ID, "w": pattern, "n": LIMIT},
        ).fetchall()
        conn.execute(
            "SELECT record_id, body FROM search_records WHERE project_id = :p AND body LIKE :w"
            " ORDER BY id DESC LIMIT :n",
            {"p": PROJECT_ID, "w": pattern, "n": LIMIT},
        ).fetchall()
        out.append((time.perf_counter_ns() - t0) / 1e6)
    return out


def run(workdir: Path, cache: Path, *, quick: bool) -> list[Row]:
    count, records = (100_000, 1_000) if quick else (1_000_000, 10_000)
    data = ensure_corpus(cache, count, records)
    conn = connect(data / "room.sqlite")
    search_store.attach_index(conn, data / "room.sqlite")
    rng = random.Random(5)
    rows: list[Row] = []
    try:
        bands = _pick_words(conn, count, rng)
        conn.execute("PRAGMA query_only = ON")
        samples, like_samples = (200, 6) if quick else (1000, 8)
        for label, words in bands.items():
            if not words:
                rows.append(Row(WORKLOAD, label, "p99 ms", None, note="no word in this band"))
                continue
            _fts_ms(conn, words, 50)  # warm the page cache and the statement cache
            fts = _fts_ms(conn, words, samples)
            like = _like_ms(conn, words, like_samples)
            f50, f99 = quantiles(fts, (50, 99))
            l50, l99 = quantiles(like, (50, 99))
            case = f"{label}, {count:,} messages + {records:,} records"
            target = "≤ 10" if label == TARGET_BAND else ""
            rows += [
                Row(WORKLOAD, case, "FTS5 p50 ms", f50, l50, "LIKE '%word%': {ref:.1f} ms"),
                Row(WORKLOAD, case, "FTS5 p99 ms", f99, l99, "LIKE '%word%': {ref:.1f} ms",
                    target, note=f"e.g. {words[0]!r}; {samples} queries, 20 words"),
                Row(WORKLOAD, case, "LIKE p50 ÷ FTS5 p50", l50 / f50 if f50 else None, None,
                    f"LIKE: {like_samples} queries, newest {LIMIT} matches, unranked"),
            ]  # fmt: skip
    finally:
        conn.close()
    return rows


# -- indexing on vs off: durable sends -------------------------------------------------------


def run_indexing(workdir: Path, *, quick: bool) -> list[Row]:
    """Durable sends (:mod:`benchlib.durable`: 10 senders, open-loop offered load above
    capacity) on fresh servers with ``search_index_messages`` on and off, alternated so that
    the machine's noise falls on both; the ratio of medians is the figure."""
    import asyncio

    from benchlib import durable

    pairs, seconds, warmup = (1, 3.0, 1.0) if quick else (3, 6.0, 1.5)
    acked: dict[str, list[float]] = {"on": [], "off": []}
    p99: dict[str, list[float]] = {"on": [], "off": []}
    # Server CPU per acknowledged message: steadier than throughput on a shared machine.
    cpu: dict[str, list[float]] = {"on": [], "off": []}
    # How far behind the indexer fell (messages committed, not yet indexed), sampled during
    # the on runs.
    behind: list[float] = []
    for i in range(pairs):
        for mode in ("off", "on") if i % 2 == 0 else ("on", "off"):
            data = workdir / f"indexing-{mode}"
            shutil.rmtree(data, ignore_errors=True)
            env = {"ROOM_SEARCH_INDEX_MESSAGES": "1" if mode == "on" else "0"}
            server = RoomServer(data, env=env).start()
            sampler = _LagSampler(data / "room.sqlite") if mode == "on" else None
            try:
                fig, _ = asyncio.run(
                    durable._case(server, 10, durable.OFFERED_PER_SEC, seconds, warmup)
                )
                if sampler is not None:
                    behind.append(sampler.stop())
            finally:
                if sampler is not None:
                    sampler.stop()
                server.stop()
                shutil.rmtree(data, ignore_errors=True)
            acked[mode].append(fig["acked_per_sec"])
            p99[mode].append(fig["p99_ms"])
            busy = (fig["server_loop_cpu_pct"] + fig["server_threads_cpu_pct"]) / 100
            cpu[mode].append(1000 * busy / fig["acked_per_sec"] if fig["acked_per_sec"] else 0.0)
    on, off = _median(acked["on"]), _median(acked["off"])
    case = f"10 senders, {durable.OFFERED_PER_SEC:,}/s offered, {pairs} pair(s) alternated"
    return [
        Row("indexing", case, "acked msg/s, indexing on", on, off,
            "indexing off: {ref:,.0f}/s"),
        Row("indexing", case, "on ÷ off", on / off if off else None, None,
            "median acked msg/s with search_index_messages on vs off", "≥ 0.85"),
        Row("indexing", case, "ack p99 ms, on", _median(p99["on"]), _median(p99["off"]),
            "off: {ref:.0f} ms"),
        Row("indexing", case, "server CPU ms per acked message, on", _median(cpu["on"]),
            _median(cpu["off"]), "off: {ref:.3f} ms (event loop + writer/reader/indexer threads)"),
        Row("indexing", case, "index lag, most messages behind", _median(behind), None,
            "sampled every 0.2 s during the run (the indexer's own file, off the send path)"),
    ]  # fmt: skip


class _LagSampler:
    """Samples :func:`room.store.indexer.lag` every 0.2 s while a run goes on, in a process of
    its own: a thread here would take the load generator's GIL and slow the sends it measures
    (it did: a sampler thread halved the acked rate of the runs it watched)."""

    SCRIPT = (
        "import sys, time\n"
        "from pathlib import Path\n"
        "from room.store import indexer\n"
        "db, most = Path(sys.argv[1]), 0\n"
        "while True:\n"
        "    try:\n"
        "        most = max(most, indexer.lag(db)['messages'])\n"
        "    except Exception:\n"
        "        pass\n"
        "    print(most, flush=True)\n"
        "    time.sleep(0.2)\n"
    )

    def __init__(self, db: Path) -> None:
        import os
        import subprocess
        import sys

        env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in sys.path if p)}
        self._proc: subprocess.Popen[str] | None = subprocess.Popen(
            [sys.executable, "-c", self.SCRIPT, str(db)],
            stdout=subprocess.PIPE,
            text=True,
            env=env,
        )
        self.most = 0.0

    def stop(self) -> float:
        proc, self._proc = self._proc, None
        if proc is not None:
            proc.terminate()
            out, _ = proc.communicate()
            lines = out.split()
            self.most = float(lines[-1]) if lines else float("nan")
        return self.most


def _median(values: list[float]) -> float:
    ordered = sorted(values)
    return ordered[len(ordered) // 2]
