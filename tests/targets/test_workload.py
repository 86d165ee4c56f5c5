import dataclasses

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from tvm_chiplet.runtime.device import STREAM_CHUNKS, simulate_workload
from tvm_chiplet.targets.routing import routing_tables
from tvm_chiplet.targets.system_generators import mesh_system
from tvm_chiplet.targets.topology import Topology
from tvm_chiplet.targets.workload import (
    BATCH_ROOM,
    WorkItem,
    activation_reserve,
    batched,
    build_workload,
    fetch_source,
    microbatch_items,
    pool_groups,
    replica_groups,
    replicate_items,
    reuses_weights,
    streamed_bytes,
)

WEIGHTS = 64_000


def streaming_system():
    # Two one-cluster chiplets, SRAM far too small for the weights, one DRAM controller.
    return mesh_system(1, 2, bandwidth=1000.0, latency=1.0, sram_bytes=1024,
                       dram_bandwidth=64.0, dram_at=((0, 0),))


def test_clusters_whose_weights_overflow_sram_fetch_them_from_dram():
    system = streaming_system()
    items = [WorkItem("a", 0, 2.0, 8.0, WEIGHTS), WorkItem("b", 0, 2.0, 8.0, WEIGHTS, [(0, 8)])]
    tasks, _, resident, fetches = build_workload(items, system)
    assert resident == [False, True]
    assert [f["task"] for f in fetches] == [0, 1]
    # 1024 B of SRAM less the 1/16 stream buffer pins 960 B: 480 B of each item's weights.
    assert all(f["bytes"] == WEIGHTS - 480 and f["route"] == [] for f in fetches)
    # Two weight buffers: both fetches may be issued at once; the DMA engine runs them in turn.
    assert [f["after"] for f in fetches] == [None, None]
    sim = simulate_workload(tasks, [], system, network="analytical", fetches=fetches)
    # The weights arrive in STREAM_CHUNKS pieces (they fill far more than the buffer's halves
    # of 32 B): an item starts as its first piece lands and ends on its last.
    fetch = (WEIGHTS - 480) / 64.0
    assert sim.task_start[0, 0] == pytest.approx(fetch / STREAM_CHUNKS)
    assert sim.task_end[0, 0] == pytest.approx(fetch + tasks[0]["cycles"] / STREAM_CHUNKS)
    assert sim.task_start[0, 1] == pytest.approx(fetch + fetch / STREAM_CHUNKS)


def test_a_streamed_item_computes_on_each_piece_of_its_weights_as_the_next_lands():
    # 8 pieces of 124 cycles, 8 chunks of 1.25 M cycles: the fetch hides behind the compute
    # but for the first piece.
    system = streaming_system()
    tasks, _, _, fetches = build_workload([WorkItem("a", 0, 2e7, 8.0, WEIGHTS)], system)
    sim = simulate_workload(tasks, [], system, network="flow", fetches=fetches)
    piece = fetches[0]["bytes"] / 64.0 / STREAM_CHUNKS
    assert sim.task_end[0, 0] == pytest.approx(piece + tasks[0]["cycles"], rel=1e-6)


def test_a_piece_waits_for_the_chunk_two_before_it_to_free_its_half_of_the_buffer():
    system = streaming_system()
    # "a" computes long enough for the DMA to idle, "b" and "c" hardly at all: c's first
    # piece goes into the half b's next-to-last chunk holds, which runs after all of a.
    items = [WorkItem("a", 0, 1e7, 8.0, WEIGHTS), WorkItem("b", 0, 2.0, 8.0, WEIGHTS),
             WorkItem("c", 0, 2.0, 8.0, WEIGHTS)]
    tasks, _, _, fetches = build_workload(items, system)
    assert [f["after"] for f in fetches] == [None, None, 0]
    sim = simulate_workload(tasks, [], system, network="flow", fetches=fetches)
    piece = fetches[2]["bytes"] / 64.0 / STREAM_CHUNKS
    assert tasks[0]["cycles"] > 2 * STREAM_CHUNKS * piece
    assert sim.task_start[0, 2] >= sim.task_end[0, 0] + piece - 1e-6


def test_a_cluster_keeps_what_fits_resident_and_streams_the_rest():
    # 3.2 MB of SRAM, 4 MB of weights: the 3 MB resident budget (all but the 1/16 stream
    # buffer) holds the 2 MB and the 1 MB items, and the 0 MB left pins nothing of the others.
    system = mesh_system(1, 1, sram_bytes=3_200_000, dram_at=((0, 0),))
    sizes = [1_000_000, 2_000_000, 500_000, 500_000]
    items = [WorkItem(str(i), 0, 1.0, 1.0, size) for i, size in enumerate(sizes)]
    assert streamed_bytes(items, system) == [0, 0, 500_000, 500_000]
    # 2.4 MB of SRAM: the 2.25 MB budget holds the 2 MB item, and the 0.25 MB left pins an
    # eighth of each other item's weights.
    system = mesh_system(1, 1, sram_bytes=2_400_000, dram_at=((0, 0),))
    assert streamed_bytes(items, system) == [875_000, 0, 437_500, 437_500]
    _, _, resident, fetches = build_workload(items, system)
    assert resident == [False]
    assert [(f["task"], f["bytes"]) for f in fetches] == [(0, 875_000), (2, 437_500),
                                                          (3, 437_500)]


def test_interleaved_fetches_take_each_controllers_share():
    # 1024 B of SRAM less the stream buffer pins 960 B of the 2001: 1041 B stream.
    system = mesh_system(1, 3, sram_bytes=1024, dram_at=((0, 0), (2, 0)))
    _, _, _, fetches = build_workload([WorkItem("a", 1, 1.0, 1.0, 2001)], system)
    assert [(f["dram"], f["bytes"], len(f["route"])) for f in fetches] == [(0, 521, 1),
                                                                           (1, 520, 1)]
    _, _, _, nearest = build_workload([WorkItem("a", 0, 1.0, 1.0, 2001)], system,
                                      dram_policy="nearest")
    assert [(f["dram"], f["bytes"], f["route"]) for f in nearest] == [(0, 1041, [])]
    shares = ((0, 1, 0.25), (0, 0, 0.75))
    _, _, _, balanced = build_workload([WorkItem("a", 0, 1.0, 1.0, 2001)], system,
                                       dram_policy="balanced", dram_shares=shares)
    assert [(f["dram"], f["bytes"]) for f in balanced] == [(1, 261), (0, 780)]


def test_two_clusters_streaming_from_one_controller_share_its_bandwidth():
    system = streaming_system()
    items = [WorkItem("a", 0, 2.0, 8.0, WEIGHTS), WorkItem("b", 1, 2.0, 8.0, WEIGHTS)]
    tasks, messages, _, fetches = build_workload(items, system)
    alone = simulate_workload(tasks[:1], [], system, fetches=fetches[:1])
    shared = simulate_workload(tasks, messages, system, fetches=fetches)
    analytical = simulate_workload(tasks, messages, system, network="analytical",
                                   fetches=fetches)
    fetch = (WEIGHTS - 960) / 64.0  # each cluster pins 960 B of its one item
    # When the last of its STREAM_CHUNKS pieces landed:
    last = tasks[0]["cycles"] / STREAM_CHUNKS
    assert alone.task_end[0, 0] - last == pytest.approx(fetch)
    assert shared.task_end[0, 0] - last == pytest.approx(2 * fetch, rel=0.01)
    assert analytical.task_end[0, 0] - last == pytest.approx(fetch, rel=0.01)
    assert len(shared.link_bytes) == len(system.links)
    assert len(shared.cluster_busy_cycles) == system.num_clusters


def test_resident_weights_need_no_fetch():
    system = mesh_system(1, 2, sram_bytes=10 * WEIGHTS)
    _, _, resident, fetches = build_workload([WorkItem("a", 1, 2.0, 8.0, WEIGHTS)], system)
    assert resident == [True, True] and fetches == []


def test_dram_controller_load_is_reported():
    from tvm_chiplet.runtime.profile import profile_report

    system = streaming_system()
    items = [WorkItem("a", 0, 2.0, 8.0, WEIGHTS), WorkItem("b", 1, 2.0, 8.0, WEIGHTS)]
    tasks, messages, _, fetches = build_workload(items, system)
    sim = simulate_workload(tasks, messages, system, fetches=fetches)
    streamed = 2 * (WEIGHTS - 960)
    assert sim.dram_bytes.tolist() == [streamed]
    assert sim.dram_busy_cycles[0] == pytest.approx(streamed / 64.0, rel=0.01)
    plan = {"tasks": [{**t, "op_id": i} for i, t in enumerate(tasks)], "messages": messages,
            "segments": [], "clusters_used": [0, 1]}
    report = profile_report(plan, system, sim)
    assert report["drams"][0]["bytes"] == streamed
    assert 0 < report["drams"][0]["utilisation"] <= 1


def lending_system():
    # Three one-cluster chiplets in a row; the controller sits at cluster 0.
    return mesh_system(1, 3, bandwidth=100.0, latency=1.0, sram_bytes=1024,
                       dram_bandwidth=50.0, dram_at=((0, 0),))


def test_a_loan_fetches_its_share_from_the_lender_and_the_rest_from_dram():
    system = lending_system()
    # Cluster 0 streams 1041 B per batch (2001 B less its 960 B resident budget); cluster 2
    # holds 200 B of weights and lends 600 B of its 1024 B of SRAM.
    items = [WorkItem("a", 0, 2.0, 8.0, 2001), WorkItem("b", 2, 2.0, 8.0, 200)]
    tasks, _, _, fetches = build_workload(items, system, sram_loans=[(0, 2, 600)])
    assert [(f["dram"], f["lender"], f["bytes"], len(f["route"])) for f in fetches] == [
        (None, 2, 600, 2), (0, None, 441, 0)]
    sim = simulate_workload(tasks, [], system, network="analytical", fetches=fetches)
    # The parts travel in parallel: 441 B from DRAM at 50 B/cycle outlast 600 B over two
    # 100 B/cycle links (+ 2 cycles of latency).
    assert sim.task_start[0, 0] == pytest.approx(441 / 50.0)
    assert sim.dram_bytes.tolist() == [441]
    assert sim.link_bytes.sum() == 2 * 600


def test_loans_split_every_streamed_item_in_proportion():
    system = lending_system()
    items = [WorkItem("a", 0, 2.0, 8.0, 1000), WorkItem("b", 0, 2.0, 8.0, 3000)]
    streamed = streamed_bytes(items, system)
    _, _, _, fetches = build_workload(items, system, sram_loans=[(0, 1, 1000)])
    lent = {f["task"]: f["bytes"] for f in fetches if f["lender"] == 1}
    assert lent == {t: int(streamed[t] * 1000 / sum(streamed)) for t in (0, 1)}
    assert sum(f["bytes"] for f in fetches) == sum(streamed)


@pytest.mark.parametrize(("loan", "match"), [
    ((0, 0, 10), "two different clusters"),
    ((0, 5, 10), "two different clusters"),
    ((0, 2, 0), "bytes > 0"),
    ((0, 2, 900), r"cluster 2 lends 900 B .* lend at most 824 B"),
    ((2, 1, 10), "cluster 2 borrows 10 B of SRAM but streams only 0 B"),
    ((1, 0, 10), "cluster 0 lends 10 B of SRAM but holds 2001 B"),
])
def test_impossible_loans_are_refused_with_the_reason(loan, match):
    items = [WorkItem("a", 0, 2.0, 8.0, 2001), WorkItem("b", 2, 2.0, 8.0, 200)]
    with pytest.raises(ValueError, match=match):
        build_workload(items, lending_system(), sram_loans=[loan])


def _copies_on_a_line(sizes, sram_bytes=1024):
    """One copy's items on cluster 0 of a 1x4 line, a copy on each other cluster."""
    system = mesh_system(1, 4, bandwidth=100.0, latency=1.0, sram_bytes=sram_bytes,
                         dram_bandwidth=50.0, dram_at=((0, 0),))
    maps = [{0: c} for c in (1, 2, 3)]
    items = replicate_items([WorkItem(str(i), 0, 2.0, 8.0, size) for i, size in enumerate(sizes)],
                            maps)
    return system, items, pool_groups([0], maps)


def test_a_weight_pool_stripes_one_set_of_weights_over_the_copies():
    # Four copies each stream 2000 B; each keeps 960 B resident (its stripe, a quarter of
    # the copy's weights when they fit the pool's 3840 B) and fetches the other three stripes.
    system, items, pool = _copies_on_a_line([800, 1200], sram_bytes=1024)
    assert pool == [(0, 1, 2, 3)]
    _, _, resident, fetches = build_workload(items, system, pool=pool)
    assert resident == [False] * 4
    assert all(f["dram"] is None for f in fetches)  # the pool holds every byte
    for task, item in enumerate(items):
        mine = [f for f in fetches if f["task"] == task]
        assert sorted(f["lender"] for f in mine) == sorted({0, 1, 2, 3} - {item.cluster})
        assert [f["bytes"] for f in mine] == [int(item.weight_bytes * 960 / 3840)] * 3
    # What each member holds for the pool fits its resident budget.
    held = {k: sum(f["bytes"] for f in fetches if f["lender"] == k) / 3 for k in range(4)}
    assert all(nbytes <= 960 for nbytes in held.values())


def test_what_the_pool_cannot_hold_streams_from_dram():
    # 8000 B per copy, 4 x 960 B of pool: each item is 3840 / 8000 pooled, the rest from DRAM.
    system, items, pool = _copies_on_a_line([4000, 4000])
    _, _, _, fetches = build_workload(items, system, pool=pool)
    first = [f for f in fetches if f["task"] == 0]
    assert [f["bytes"] for f in first if f["lender"] is not None] == [960 * 4000 // 8000] * 3
    from_dram = sum(f["bytes"] for f in first if f["dram"] is not None)
    assert from_dram == int(4000 * (1 - 960 / 8000)) - 3 * (960 * 4000 // 8000)


def test_each_part_of_a_pooled_item_is_fetched_once_and_multicast_to_its_readers():
    system, items, pool = _copies_on_a_line([4000, 4000])
    tasks, _, _, fetches = build_workload(items, system, pool=pool)
    groups: dict[int, list[dict]] = {}
    for fetch in fetches:
        groups.setdefault(fetch["shared"], []).append(fetch)
    # Per item (2): the DRAM rest, read by all 4 members, and each member's stripe, read by
    # the 3 others; every part of a group carries the same bytes.
    assert sorted(len(group) for group in groups.values()) == [3] * 8 + [4] * 2
    for lead, group in groups.items():
        assert fetches[lead] in group
        assert {f["bytes"] for f in group} == {fetches[lead]["bytes"]}
        source = {(f["dram"], f["lender"]) for f in group}
        assert len(source) == 1
        readers = {f["cluster"] for f in group}
        assert readers == {0, 1, 2, 3} - {f["lender"] for f in group}
    sim = simulate_workload(tasks, [], system, batches=4, network="flow", fetches=fetches,
                            copies=4)
    once = sum(fetches[lead]["bytes"] for lead, group in groups.items() if len(group) == 4)
    assert sim.dram_bytes.sum() == pytest.approx(once)  # 4 copies, 1 round, each byte once
    # The flit routers do not replicate: there each member's copy crosses the controller.
    flit = simulate_workload(tasks, [], system, batches=4, network="flit", fetches=fetches,
                             copies=4)
    assert flit.dram_bytes.sum() == pytest.approx(4 * once)



def test_a_pools_fetches_keep_their_ring_when_the_routing_tables_route_the_rest():
    # On a line without multicast routers the pool's stripes go around a ring, relayed hop by
    # hop on table routes: the artifact's simulation (routing tables walked, as tvmc compile's
    # estimate and tvmc run simulate) moves the same bytes over the same links as the
    # planner's, where re-walking them straight from each lender would not.
    system, items, pool = _copies_on_a_line([4000, 4000])
    tasks, messages, _, fetches = build_workload(items, system, pool=pool)
    tables = routing_tables(system)
    relayed = [f for f in fetches if f["shared"] is not None
               and f["route"] != tables.route(fetch_source(f, system), f["cluster"])]
    assert relayed
    planned, walked = (simulate_workload(tasks, messages, system, batches=4, network="flow",
                                         fetches=fetches, copies=4, routing=routing)
                       for routing in (None, tables))
    np.testing.assert_array_equal(walked.link_bytes, planned.link_bytes)
    assert walked.total_cycles == planned.total_cycles

def test_a_pool_beats_copies_streaming_from_one_controller():
    system, items, pool = _copies_on_a_line([4000, 4000, 4000], sram_bytes=8192)
    runs = {}
    for name, groups in (("dram", ()), ("pooled", pool)):
        tasks, _, _, fetches = build_workload(items, system, pool=groups)
        runs[name] = simulate_workload(tasks, [], system, batches=4, network="flow",
                                       fetches=fetches, copies=4)
    assert runs["pooled"].dram_bytes.sum() < runs["dram"].dram_bytes.sum() / 10
    assert runs["pooled"].total_cycles < runs["dram"].total_cycles / 2


def test_copies_whose_sram_holds_two_sets_of_weights_keep_two_pools_of_neighbours():
    # 12 kB per copy, 4 x 6 kB of budget: two pools, copies 0-1 and copies 2-3.
    system, items, pool = _copies_on_a_line([4000, 4000, 4000], sram_bytes=8192)
    _, _, _, fetches = build_workload(items, system, pool=pool)
    lenders = {c: {f["lender"] for f in fetches if f["cluster"] == c} for c in range(4)}
    assert lenders == {0: {1}, 1: {0}, 2: {3}, 3: {2}}
    assert all(f["bytes"] == 4000 // 2 for f in fetches)  # each holds half of its pool's set


def _replicas(sram_bytes, weights=3000, keys=("w", "w", "w", "w"), deps=None):
    """A producer on cluster 0 of a 1x4 multicast line, and four parts of one op (the same
    weights, ``keys``) reading it, one per cluster, beside 500 B of other weights each."""
    system = mesh_system(1, 4, bandwidth=100.0, latency=1.0, sram_bytes=sram_bytes,
                         dram_bandwidth=50.0, dram_at=((0, 0),), multicast=True)
    items = [WorkItem("x", 0, 2.0, 8.0, 0.0, output_bytes=8)]
    items += [WorkItem(f"other{c}", c, 2.0, 8.0, 500.0) for c in range(4)]
    items += [WorkItem(f"part{c}", c, 2.0, 8.0, weights, deps or [(0, 8)], 8, key)
              for c, key in enumerate(keys)]
    return system, items


def test_replicas_of_one_weight_keep_a_stripe_each_and_multicast_it_to_the_others():
    # 3500 B of weights on each 2048 B cluster: each part keeps 750 B (a quarter) of the
    # replicated 3000 B resident and fetches the other three stripes from their holders.
    system, items = _replicas(2048)
    assert replica_groups(items, system) == {i: (5, 6, 7, 8) for i in range(5, 9)}
    tasks, messages, resident, fetches = build_workload(items, system)
    assert resident == [False] * 4
    assert all(f["dram"] is None and f["bytes"] == 750 for f in fetches)  # no DRAM read
    for c in range(4):
        mine = [f for f in fetches if f["task"] == 5 + c]
        assert sorted(f["lender"] for f in mine) == sorted({0, 1, 2, 3} - {c})
    # Each stripe is one transfer, shared by its three readers: a multicast tree.
    shared = {}
    for f in fetches:
        shared.setdefault(f["shared"], []).append(f)
    assert sorted(len(group) for group in shared.values()) == [3] * 4
    sim = simulate_workload(tasks, messages, system, network="flow", fetches=fetches)
    assert sim.dram_bytes.sum() == 0
    # A link on the way to several readers carries a stripe once, not once per reader.
    sent = sum(len(f["route"]) * f["bytes"] for f in fetches)
    assert sim.link_bytes.sum() - sum(len(m["route"]) * m["bytes"] for m in messages) < sent
    # Without pooling each part would stream 3000 + 500 - 15/16 x 2048 B from DRAM.
    alone = [dataclasses.replace(item, weight_key="") for item in items]
    fetched = sum(f["bytes"] for f in build_workload(alone, system)[3])
    assert fetched == pytest.approx(4 * (3500 - 1920), abs=4)


def test_replicas_that_fit_their_clusters_stay_whole_and_fetch_nothing():
    system, items = _replicas(8192)
    assert replica_groups(items, system) == {}
    assert build_workload(items, system)[3] == []


def test_only_replicas_that_do_not_wait_for_each_other_pool():
    # Parts 1-3 read part 0: layers that share weights, run one after another, not replicas.
    system, items = _replicas(2048, deps=[(5, 8)])
    items[5] = dataclasses.replace(items[5], deps=[(0, 8)])
    groups = replica_groups(items, system)
    assert groups == {i: (6, 7, 8) for i in range(6, 9)}  # the three at one depth
    # Plumbing before one part (a halo's slice, a concatenation) leaves it with the others.
    system, items = _replicas(2048)
    items.insert(5, WorkItem("slice", 0, 0.0, 8.0, 0.0, [(0, 8)], 8))
    items[6] = dataclasses.replace(items[6], deps=[(5, 8)])
    assert replica_groups(items, system) == {i: (6, 7, 8, 9) for i in range(6, 10)}
    # Parts with different weights, or with none named, do not pool.
    system, items = _replicas(2048, keys=("a", "b", "", "a"))
    assert replica_groups(items, system) == {5: (5, 8), 8: (5, 8)}


def test_replicas_whose_stripes_do_not_fit_stream_from_dram():
    # 16000 B over 4 clusters of 2048 B: a 4000 B stripe fits no resident budget.
    system, items = _replicas(2048, weights=16000)
    assert replica_groups(items, system) == {}
    _, _, _, fetches = build_workload(items, system)
    assert all(f["dram"] == 0 for f in fetches)


def test_a_replica_that_runs_its_ops_in_another_order_fetches_its_copy_alone():
    # Two ops split over three clusters of a multicast line, their parts pooled as replicas;
    # cluster 1 runs op y before op x, cluster 0 x before y. A stripe sent once to both would
    # wait for cluster 1's buffer, freed only once y has run, whose own stripe waits for
    # cluster 0's buffer, freed once x has run: a cycle. Cluster 1 fetches its copy alone.
    sram = 1 << 20
    system = mesh_system(1, 3, bandwidth=100.0, latency=1.0, sram_bytes=sram,
                         dram_bandwidth=50.0, dram_at=((0, 0),), multicast=True)

    def item(name, cluster, key, weights=0.6 * sram):
        return WorkItem(name, cluster, 2e5, 8.0, weights, (), 8, key)

    before = [item(f"other{c}{i}", c, "", 0.2 * sram) for c in range(3) for i in range(2)]
    crossed = [*before, item("x0", 0, "x"), item("y1", 1, "y"), item("y0", 0, "y"),
               item("x1", 1, "x"), item("x2", 2, "x"), item("y2", 2, "y")]
    in_step = [*before, item("x0", 0, "x"), item("x1", 1, "x"), item("x2", 2, "x"),
               item("y0", 0, "y"), item("y1", 1, "y"), item("y2", 2, "y")]
    runs = []
    for items in (crossed, in_step):
        assert len(set(replica_groups(items, system).values())) == 2
        tasks, messages, _, fetches = build_workload(items, system)
        assert all(f["dram"] is None for f in fetches)
        runs.append(simulate_workload(tasks, messages, system, fetches=fetches))
    assert np.isfinite(runs[0].task_end).all()
    # Shared where the orders agree, alone where they cross: more bytes on the links.
    assert runs[0].link_bytes.sum() > runs[1].link_bytes.sum()
    assert runs[0].dram_bytes.sum() == runs[1].dram_bytes.sum() == 0


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_replicas_in_any_order_with_any_reads_between_them_always_finish(data):
    # Three ops split over the four clusters of a multicast line, every cluster running its
    # parts in its own order, interleaved at random, each part perhaps reading an earlier part.
    sram = 1 << 20
    system = mesh_system(1, 4, bandwidth=100.0, latency=1.0, sram_bytes=sram,
                         dram_bandwidth=50.0, dram_at=((0, 0),), multicast=True)
    queues = {c: data.draw(st.permutations("xyz")) for c in range(4)}
    items = [WorkItem(f"other{c}", c, 1e4, 8.0, 0.3 * sram) for c in range(4)]
    while any(queues.values()):
        cluster = data.draw(st.sampled_from([c for c in range(4) if queues[c]]))
        key = queues[cluster].pop(0)
        read = data.draw(st.sampled_from([None, *range(4, len(items))]))
        deps = [(read, 8)] if read is not None and items[read].weight_key != key else []
        items.append(WorkItem(f"{key}{cluster}", cluster, data.draw(st.floats(1e5, 4e5)), 8.0,
                              0.5 * sram, deps, 8, key))
    assume(replica_groups(items, system))
    tasks, messages, _, fetches = build_workload(items, system)
    sim = simulate_workload(tasks, messages, system, fetches=fetches)
    assert np.isfinite(sim.task_end).all()


def test_copies_never_pool_their_weights_as_replicas():
    _, items = _replicas(2048)
    copies = replicate_items(items[:1] + items[5:6], [{0: 1}])
    assert [item.weight_key for item in copies] == ["", "w", "", "w@1"]


def test_a_pool_refuses_loans_beside_it():
    system, items, pool = _copies_on_a_line([800, 1200])
    with pytest.raises(ValueError, match="weight pool and SRAM loans cannot be combined"):
        build_workload(items, system, sram_loans=[(0, 1, 10)], pool=pool)


def _fan_out(readers_bytes, multicast=True):
    """Item 0 on the first of a 1x4 line writes 120 B; one reader per other cluster reads
    ``readers_bytes[i]`` of it."""
    system = mesh_system(1, 4, bandwidth=10.0, latency=1.0, multicast=multicast)
    items = [WorkItem("a", 0, 2.0, 8.0, 0.0, output_bytes=120)]
    items += [WorkItem(f"r{c}", c, 2.0, 8.0, 0.0, [(0, nbytes)])
              for c, nbytes in enumerate(readers_bytes, start=1)]
    return system, items


def test_a_microbatch_scales_compute_activations_and_messages_but_reads_weights_once():
    items = [WorkItem("a", 0, 10.0, 130.0, 100.0, (), 20.0),
             WorkItem("b", 1, 4.0, 50.0, 0.0, [(0, 20)], 30.0)]
    system = streaming_system()
    a, b = microbatch_items(items, system, 4)
    assert (a.flops, a.bytes_moved, a.weight_bytes, a.output_bytes) == (40.0, 220.0, 100.0, 80.0)
    assert (b.bytes_moved, list(b.deps)) == (200.0, [(0, 80)])
    assert microbatch_items(items, system, 1) == items
    with pytest.raises(ValueError, match="microbatch must be an integer >= 1, found 0"):
        microbatch_items(items, system, 0)


def test_a_microbatch_fetches_streamed_weights_once_for_all_its_inputs():
    # 4 inputs per fetch: their activations (3 x 40 B beyond the first input's) come out of
    # the SRAM for weights, so 1024 - 120 B, less the stream buffer, stays resident. "b" has
    # no weights to reuse: it runs the inputs one at a time and reserves nothing.
    system = streaming_system()
    items = [WorkItem("a", 0, 2.0, WEIGHTS + 40.0, WEIGHTS),
             WorkItem("b", 1, 2.0, 8.0, 0.0, [(0, 8)])]
    assert activation_reserve(items, system, 4) == [120.0, 0.0]
    tasks, messages, _, fetches = build_workload(items, system, microbatch=4)
    one_tasks, one_messages, _, one_fetches = build_workload(items, system)
    assert [f["bytes"] for f in fetches] == [int(WEIGHTS - 15 / 16 * (1024 - 120))]
    assert [f["bytes"] for f in one_fetches] == [WEIGHTS - 960]
    assert messages[0]["bytes"] == 4 * one_messages[0]["bytes"]
    assert tasks[0]["mac_pj"] == pytest.approx(4 * one_tasks[0]["mac_pj"])
    # DRAM-bound: 8 inputs in 2 rounds of 4 take about a quarter of 8 rounds of one.
    batched = simulate_workload(tasks, messages, system, batches=8, fetches=fetches,
                                microbatch=4)
    single = simulate_workload(one_tasks, one_messages, system, batches=8, fetches=one_fetches)
    assert batched.inputs == single.inputs == 8 and batched.batches == 2
    assert batched.total_cycles < 0.3 * single.total_cycles
    assert batched.throughput_per_cycle > 3 * single.throughput_per_cycle


def test_an_item_whose_microbatch_activations_would_crowd_out_its_weights_runs_input_by_input():
    # "head" reuses its weights (700 B against 500 B of activations per input, as a language
    # model's head), but its cluster's 1024 B leave BATCH_ROOM (960 B, all but the stream
    # buffer) for the other inputs' activations: a microbatch of 2 batches it, one of 3
    # (1000 B more) runs it input by input and reserves nothing for it, while "a" (8 B of
    # activations per input) still batches.
    system = streaming_system()
    items = [WorkItem("a", 0, 2.0, WEIGHTS + 8.0, WEIGHTS),
             WorkItem("head", 1, 2.0, 1200.0, 700.0)]
    assert BATCH_ROOM * 1024 == 960
    assert batched(items, system, 1) == [False, False]
    assert batched(items, system, 2) == [True, True]
    assert batched(items, system, 3) == [True, False]
    assert activation_reserve(items, system, 2) == [8.0, 500.0]
    assert activation_reserve(items, system, 3) == [16.0, 0.0]
    _, head = microbatch_items(items, system, 3)
    assert head.bytes_moved == 3 * 1200.0
    assert microbatch_items(items, system, 2)[1].bytes_moved == 700.0 + 2 * 500.0
    # Its weights fit its cluster: input by input costs no fetch; "a" streams once per round.
    _, _, resident, fetches = build_workload(items, system, microbatch=3)
    assert resident == [False, True] and [f["task"] for f in fetches] == [0]


def test_an_item_whose_activations_outweigh_its_weights_runs_a_microbatch_input_by_input():
    # "early" reads 9 times its weights in activations per input (an early convolution): a
    # microbatch of 3 runs it three times, fetching its weights each time, and reserves no
    # SRAM for its activations; "late" (weights 100x its activations) reuses one fetch.
    system = mesh_system(1, 1, bandwidth=1000.0, latency=1.0, sram_bytes=16384,
                         dram_bandwidth=64.0, dram_at=((0, 0),))
    early = WorkItem("early", 0, 2.0, 200_000.0, 20_000.0)
    late = WorkItem("late", 0, 2.0, 202_000.0, 200_000.0, [(0, 100)])
    assert [reuses_weights(item) for item in (early, late)] == [False, True]
    a, b = microbatch_items([early, late], system, 3)
    assert (a.bytes_moved, b.bytes_moved) == (3 * 200_000.0, 200_000.0 + 3 * 2000.0)
    assert activation_reserve([early, late], system, 3) == [2 * 2000.0]
    _, _, _, fetches = build_workload([early, late], system, microbatch=3)
    resident = 15 / 16 * 16384  # at most: the SRAM less the stream buffer
    assert 3 * (20_000 - resident) <= fetches[0]["bytes"] <= 3 * 20_000
    assert 200_000 - resident <= fetches[1]["bytes"] <= 200_000
    # Items with 9x more activation than weights: a microbatch that would need 1.6 MB of
    # SRAM for theirs runs, as they reserve none.
    assert build_workload([early, early], system, microbatch=9)[0][0]["cycles"] > 0


def test_a_whole_output_read_on_several_clusters_is_one_multicast():
    system, items = _fan_out([120, 120, 120])
    tasks, messages, _, fetches = build_workload(items, system)
    assert [m["multicast"] for m in messages] == [0, 0, 0]
    sim = simulate_workload(tasks, messages, system, network="flow", fetches=fetches)
    # 120 B cross every link of the line once: 12 cycles, not 36 on the first link.
    assert sorted(sim.link_bytes[sim.link_bytes > 0]) == [120, 120, 120]
    unicast_system, _ = _fan_out([120, 120, 120], multicast=False)
    tasks, unicast, _, fetches = build_workload(
        [*items[:3]], unicast_system)  # two readers: no ring pays on a line of three
    assert [m["multicast"] for m in unicast] == [None, None]
    slow = simulate_workload(tasks, unicast, unicast_system, network="flow", fetches=fetches)
    assert sorted(slow.link_bytes[slow.link_bytes > 0]) == [120, 240]


def test_an_all_gathers_trees_alternate_their_orders_and_spread_over_the_links():
    # 36 clusters of a 6x6 multicast mesh each send 100 B to all the others. X-first trees
    # alone would put 30 parts on a corner's vertical link (so a ring, 18, was taken); the
    # workload's trees, Y first from the chiplets of odd colour, put at most 18 parts on any
    # link without relaying, and the simulation agrees.
    system = mesh_system(6, 6, bandwidth=10.0, latency=1.0, multicast=True)
    items = [WorkItem(f"p{c}", c, 2.0, 8.0, 0.0, output_bytes=100) for c in range(36)]
    items += [WorkItem(f"g{c}", c, 2.0, 8.0, 0.0, [(p, 100) for p in range(36) if p != c])
              for c in range(36)]
    tasks, messages, _, fetches = build_workload(items, system)
    topology = Topology(system)
    for m in messages:
        src, dst = tasks[m["src"]]["cluster"], tasks[m["dst"]]["cluster"]
        chiplet = system.chiplet_of(src)
        assert m["route"] == topology.tree_route(src, dst, (chiplet.x + chiplet.y) % 2 == 1)
    sim = simulate_workload(tasks, messages, system, network="flow", fetches=fetches)
    assert sim.link_bytes.max() == 18 * 100


def test_without_multicast_routers_a_fan_out_is_relayed_around_a_ring():
    system, items = _fan_out([120, 120, 120], multicast=False)
    tasks, messages, _, fetches = build_workload(items, system)
    assert [m["multicast"] for m in messages] == [0, 0, 0]
    # Each reader's route follows the ring (here the line), so every link carries the value
    # once: reader 2's route is reader 1's plus one hop.
    assert messages[1]["route"][: len(messages[0]["route"])] == messages[0]["route"]
    sim = simulate_workload(tasks, messages, system, network="flow", fetches=fetches)
    assert sorted(sim.link_bytes[sim.link_bytes > 0]) == [120, 120, 120]


def test_parts_of_an_output_and_lone_readers_stay_unicast():
    # Readers of 60 B read different halves: not the same value, so no multicast.
    system, items = _fan_out([60, 60, 120])
    _, messages, _, _ = build_workload(items, system)
    assert [m["multicast"] for m in messages] == [None, None, None]


def test_the_flit_model_sends_each_copy_of_a_ring_relay_on_the_systems_route():
    system = mesh_system(4, 4, bandwidth=10.0, latency=1.0)  # the ring pays on a 4x4 mesh
    items = [WorkItem("a", 0, 2.0, 8.0, 0.0, output_bytes=120)]
    items += [WorkItem(f"r{c}", c, 2.0, 8.0, 0.0, [(0, 120)]) for c in range(1, 16)]
    tasks, messages, _, fetches = build_workload(items, system)
    assert {m["multicast"] for m in messages} == {0}
    topology = Topology(system)
    direct = [{**m, "multicast": None, "route": topology.route(0, tasks[m["dst"]]["cluster"])}
              for m in messages]
    assert [m["route"] for m in messages] != [m["route"] for m in direct]
    flit = simulate_workload(tasks, messages, system, network="flit", fetches=fetches)
    alone = simulate_workload(tasks, direct, system, network="flit", fetches=fetches)
    np.testing.assert_array_equal(flit.link_bytes, alone.link_bytes)
    assert flit.total_cycles == alone.total_cycles
