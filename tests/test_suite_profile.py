"""benchmarks/suite_profile.py: JAX's compile events summed per test file, merged over processes."""

import jax
import jax.numpy as jnp
import numpy as np

from benchmarks import suite_profile


def test_a_compilation_is_counted_for_the_running_file(monkeypatch):
    monkeypatch.setattr(suite_profile, "_sums", suite_profile.collections.defaultdict(suite_profile.collections.Counter))
    monkeypatch.setattr(suite_profile, "_current", ["tests/here.py"])
    suite_profile.listen()
    suite_profile.listen()  # once only: each event still counts once
    jax.jit(lambda x: jnp.sin(x) * 3.0 + 0.125)(np.arange(7, dtype=np.float32)).block_until_ready()  # a new program
    here = suite_profile._sums["tests/here.py"]
    assert here["traces"] >= 1 and here["lowerings"] == 1 and here["compiles"] == 1
    assert here["compile_s"] > 0 and here["lower_s"] > 0 and here["trace_s"] > 0


def test_parts_merge_file_by_file_and_the_table_sorts_by_cpu_time():
    a = {"tests/a.py": {"cpu_s": 2.0, "compile_s": 1.5, "compiles": 3, "trace_s": 0.25}}
    b = {"tests/a.py": {"cpu_s": 1.0, "compiles": 1, "cache_hits": 1}, "tests/b.py": {"cpu_s": 9.0, "compiles": 2}}
    merged = suite_profile.merge([a, b])
    assert merged["tests/a.py"] == {"cpu_s": 3.0, "compile_s": 1.5, "compiles": 4, "cache_hits": 1, "cache_load_s": 0,
                                    "lower_s": 0, "lowerings": 0, "trace_s": 0.25, "traces": 0}
    assert merged["tests/b.py"]["cpu_s"] == 9.0 and merged["tests/b.py"]["compile_s"] == 0
    rows = suite_profile.table(merged).splitlines()
    assert [row.split()[0] for row in rows[1:]] == ["(all)", "tests/b.py", "tests/a.py"]
    assert rows[1].split()[1:4] == ["12.0", "1.5", "6"]
