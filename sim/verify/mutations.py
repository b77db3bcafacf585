"""The curated mutations of ``epfabric mutate`` (``make mutate``), as plain data.

Each entry breaks one behaviour on purpose:

``name``
    a short identifier (``--only NAME``);
``file``
    the source file, relative to the repository root;
``old`` / ``new``, or ``edits`` = ``[(old, new), ...]``
    exact text replacements in ``file``; each ``old`` must occur exactly
    once, or the mutation is stale and ``epfabric mutate`` says so;
``description``
    what the mutation breaks, in one line;
``tests``
    pytest node ids that should fail under it (a parametrised id without its
    ``[case]`` stands for every case); chosen to fail fast;
``harmless`` (optional)
    why no test can catch it, measured — the mutation is still applied and
    its tests run, but it is not expected to be caught;
``timeout`` (optional)
    seconds for all of its tests together (default 300).

A new kernel or block adds its mutations here.
"""

MUTATIONS = [
    {
        "name": "ub_flag_word_early",
        "file": "hw/ub_port.py",
        "edits": [
            ("        self.beats = BLOCK_BYTES // self.beat_bytes\n",
             "        self.beats = BLOCK_BYTES // self.beat_bytes if non_atomic else 2\n"),
            ("        return (((1 << per) - 1) << (beat * per)) & full\n",
             "        if not self.non_atomic:\n"
             "            return 1 if beat == 0 else full & ~1\n"
             "        return (((1 << per) - 1) << (beat * per)) & full\n"),
        ],
        "description": "the atomic UB port commits a block's flag word one cycle before the rest "
                       "of the block",
        "tests": [
            "tests/hw/test_race.py::test_tff_reader_polling_every_cycle_never_sees_a_torn_block",
            "tests/hw/test_ub_port.py::test_property_atomic_never_mixed[pysim]",
        ],
        "timeout": 120,
    },
    {
        "name": "switch_drops_loser",
        "file": "hw/switch.py",
        "old": "            m.d.comb += g.eq(Mux(load, grant, 0))\n",
        "new": "            m.d.comb += g.eq(Mux(load, req, 0))\n",
        "description": "the switch pops every input that asked for an output, so the loser of an "
                       "arbitration is dropped",
        "tests": [
            "tests/hw/test_switch.py::test_round_robin_shares_an_output_equally_and_backpressures",
            "tests/hw/test_switch.py::test_random_traffic_with_stalling_receivers_loses_nothing",
        ],
        "timeout": 120,
    },
    {
        "name": "switch_fixed_priority",
        "file": "hw/arbiter.py",
        "old": "                m.d.sync += ptr.eq(Mux(self.grant == n - 1, 0, self.grant + 1))\n",
        "new": "                pass\n",
        "description": "the round-robin arbiter forgets its last grant: fixed priority instead of "
                       "round robin, so a busy input of a switch output starves the others",
        "tests": [
            "tests/hw/test_arbiter.py::test_every_requester_in_turn_from_the_one_after_the_last_served",
            "tests/hw/test_switch.py::test_round_robin_shares_an_output_equally_and_backpressures",
        ],
        "timeout": 120,
    },
    {
        "name": "link_latency_short",
        "file": "hw/link.py",
        "old": "        self.latency = latency\n",
        "new": "        self.latency = max(LINK_MIN_LATENCY, latency - 1) if latency else 0\n",
        "description": "a link delivers one cycle early (latency - 1, never below the minimum)",
        "tests": [
            "tests/hw/test_link.py::test_lone_flit_latency_is_exact",
            "tests/hw/test_topology.py::test_every_pair_has_its_class_latency",
        ],
        "timeout": 120,
    },
    {
        "name": "link_reorders_flits",
        "file": "hw/link.py",
        "old": "        head_data, due_data = ring_storage(m, width + wait_bits, depth, produce, accept, "
               "entry,\n                                    [head, due_ptr])\n",
        "new": "        head_data, due_data = ring_storage(m, width + wait_bits, depth, produce, accept, "
               "entry,\n                                    [head ^ 1, due_ptr])\n",
        "description": "a link sends the flit of the neighbouring ring slot (head ^ 1): flits leave "
                       "in swapped pairs, a later flit overtaking an earlier one",
        "tests": [
            "tests/hw/test_link.py::test_backpressure_never_drops_and_keeps_order",
        ],
        "timeout": 120,
    },
    {
        "name": "inc_nic_tx_rs_fixed_priority",
        "file": "hw/inc_nic_tx.py",
        "old": "        m.d.comb += [tx_arb.requests.eq(Cat(rs.valid & self.inject, "
               "ag.valid & self.inject)),\n",
        "new": "        m.d.comb += [tx_arb.requests.eq(Cat(rs.valid & self.inject, "
               "ag.valid & self.inject & ~(rs.valid & self.inject))),\n",
        "description": "the INC NIC's tx gives RS fixed priority over AG (AG asks only when RS "
                       "does not): whenever both engines' flits become eligible together, RS "
                       "wins, so a busy RS delays AG(j+1) behind all of RS(j)",
        "tests": [
            "tests/hw/test_inc_nic.py::"
            "test_tx_round_robin_when_ag_and_rs_become_eligible_together",
            "tests/hw/test_fairness.py::test_inc_nic_tx_alternates_the_ag_and_rs_engines",
        ],
        "timeout": 120,
    },
    # Fixed priority in place of each round robin (tests/hw/test_fairness.py; the trace merge's
    # in tests/hw/test_system.py): the arbiter sees only the lowest requester asking
    # (``asks & -asks``), so the lowest index always wins.
    {
        "name": "inc_nic_memory_fixed_priority",
        "file": "hw/inc_nic_memory.py",
        "old": "        m.d.comb += [mem_arb.requests.eq(Cat(s.valid for s in sources)),\n",
        "new": "        asks = Cat(s.valid for s in sources)\n"
               "        m.d.comb += [mem_arb.requests.eq(asks & -asks),\n",
        "description": "the INC NIC's memory port serves its requesters by fixed priority (the "
                       "writer, then the AG, RS and ring readers): a busy writer starves the reads",
        "tests": ["tests/hw/test_fairness.py::"
                  "test_inc_nic_memory_port_serves_the_writer_and_every_reader_in_turn"],
        "timeout": 120,
    },
    {
        "name": "router_tx_fixed_priority",
        "file": "hw/router_tx.py",
        "old": "        m.d.comb += [tx_arb.requests.eq(Cat(self.answers.valid, self.acks.valid,\n"
               "                                            *(r.valid for r in self.requests))),\n",
        "new": "        asks = Cat(self.answers.valid, self.acks.valid, "
               "*(r.valid for r in self.requests))\n"
               "        m.d.comb += [tx_arb.requests.eq(asks & -asks),\n",
        "description": "the die router's tx serves by fixed priority (data answers, acks, then the "
                       "cores by index): a busy RSP queue starves the cores' requests",
        "tests": ["tests/hw/test_fairness.py::"
                  "test_router_tx_serves_answers_acks_and_every_core_in_turn"],
        "timeout": 120,
    },
    {
        "name": "ub_port_fixed_priority",
        "file": "hw/router_ub.py",
        "old": "        m.d.comb += [arb.requests.eq(Cat(*(c.valid for c in self.cores), "
               "self.rx.valid)),\n",
        "new": "        asks = Cat(*(c.valid for c in self.cores), self.rx.valid)\n"
               "        m.d.comb += [arb.requests.eq(asks & -asks),\n",
        "description": "the die's UB port serves by fixed priority (core 0 first, rx last): a "
                       "core storing in every cycle starves the other cores and remote writes",
        "tests": ["tests/hw/test_fairness.py::test_ub_port_serves_every_core_and_rx_in_turn"],
        "timeout": 120,
    },
    {
        "name": "switch_output_fixed_priority",
        "file": "hw/switch.py",
        "old": "                arb.requests.eq(req),\n",
        "new": "                arb.requests.eq(req & -req),\n",
        "description": "every switch output serves its inputs by fixed priority (the lowest "
                       "port first): a busy low port starves the others at a shared output",
        "tests": ["tests/hw/test_fairness.py::test_switch_output_serves_every_input_in_turn"],
        "timeout": 120,
    },
    {
        "name": "inc_post_fixed_priority",
        "file": "hw/die.py",
        "old": "        m.d.comb += [post_arb.requests.eq(Cat(c.inc_post.valid for c in cores)),\n",
        "new": "        asks = Cat(c.inc_post.valid for c in cores)\n"
               "        m.d.comb += [post_arb.requests.eq(asks & -asks),\n",
        "description": "the die's INC post port takes the cores' posts by fixed priority (core 0 "
                       "first): a core posting back to back holds off the others' posts",
        "tests": ["tests/hw/test_fairness.py::test_die_inc_posts_and_cube_rows_go_round_robin"],
        "timeout": 120,
    },
    {
        "name": "cube_unit_fixed_priority",
        "file": "hw/die.py",
        "old": "        m.d.comb += [cube_arb.requests.eq(Cat(c.cube_req for c in cores)),\n",
        "new": "        asks = Cat(c.cube_req for c in cores)\n"
               "        m.d.comb += [cube_arb.requests.eq(asks & -asks),\n",
        "description": "the die's cube unit serves the cores' rows by fixed priority (core 0 "
                       "first): with three cores computing rows, the third never gets the unit",
        "tests": ["tests/hw/test_fairness.py::test_die_inc_posts_and_cube_rows_go_round_robin"],
        "timeout": 120,
    },
    {
        "name": "trace_merge_fixed_priority",
        "file": "hw/system.py",
        "old": "        m.d.comb += [trace_arb.requests.eq(Cat(t.valid for t, _e in traces)),\n",
        "new": "        asks = Cat(t.valid for t, _e in traces)\n"
               "        m.d.comb += [trace_arb.requests.eq(asks & -asks),\n",
        "description": "the system's MARK trace merge takes the cores' marks by fixed priority "
                       "(core 0 first): a core marking back to back stalls the others' marks",
        "tests": ["tests/hw/test_system.py::test_trace_merge_takes_every_cores_marks_in_turn"],
        "timeout": 120,
    },
    {
        "name": "inc_switch_copy_keeps_the_whole_mask",
        "file": "hw/switch.py",
        "old": "        cut = Mux(head.mcast, head_bits[lo:lo + w] & keep, head_bits[lo:lo + w])\n",
        "new": "        cut = head_bits[lo:lo + w]\n",
        "description": "a multicast copy leaves with its whole destination set instead of the "
                       "dies behind its output: the next switch copies it again, so dies get "
                       "duplicates",
        "tests": [
            "tests/hw/test_inc_switch.py::test_multicast_reaches_each_destination_once",
            "tests/hw/test_topology.py::test_inc_superpod_multicast_and_reductions_under_stalls",
        ],
        "timeout": 180,
    },
    {
        "name": "inc_reduce_releases_one_early",
        "file": "hw/inc_reduce.py",
        "old": "        m.d.comb += done.eq(total >= expected)\n",
        "new": "        m.d.comb += done.eq(total + 1 >= expected)\n",
        "description": "the in-switch reduction releases a group one contribution early (and the "
                       "last contribution opens a slot of its own)",
        "tests": [
            "tests/hw/test_inc_switch.py::test_reductions_release_once_with_the_exact_sum",
        ],
        "timeout": 180,
    },
    {
        "name": "inc_reduce_after_n_minus_2",
        "file": "hw/inc_engine.py",
        "old": "        m.d.comb += last.eq(Mux(hit, slot.count, 0) == n - 2)\n",
        "new": "        m.d.comb += last.eq(Mux(hit, slot.count, 0) == n - 3)\n",
        "description": "the INC engine forwards a reduced chunk to its root after N-2 of its N-1 "
                       "contributions",
        "tests": [
            "tests/hw/test_inc_engine.py::test_rs_reduces_interleaved_chunks_exactly",
            "tests/hw/test_inc_endpoint.py::test_barrier_costs_a_round_trip",
        ],
        "timeout": 180,
    },
    {
        "name": "fp_lane_sum_drops_the_sticky_bit",
        "file": "hw/lane_arith.py",
        "old": "    return {\"p\": big.sig << _GUARD, \"q\": moved[24:] | moved[:24].any(),\n",
        "new": "    return {\"p\": big.sig << _GUARD, \"q\": moved[24:],\n",
        "description": "the floating-point lane sum drops the bits of the smaller addend shifted "
                       "out of its window instead of jamming them into the sticky bit (sums of "
                       "addends 4 or more binades apart round wrongly)",
        "tests": ["tests/hw/test_lane_arith.py::test_float_lanes_round_like_numpy"],
        "timeout": 180,
    },
    {
        "name": "bf16_sum_truncated_not_rounded",
        "file": "hw/lane_arith.py",
        "old": "    return Cat(head, *(fp.f32_to_bf16(m, v, name=f\"{name}{k}\") for k, v in "
               "enumerate(body)),\n",
        "new": "    return Cat(head, *(v[16:] for k, v in enumerate(body)),\n",
        "description": "a bf16 sum leaves its fp32 accumulator truncated to bf16 instead of "
                       "rounded to nearest even",
        "tests": ["tests/hw/test_lane_arith.py::test_bf16_accumulates_in_fp32_and_rounds_once",
                  "tests/hw/test_inc_reduce.py::test_float_groups_are_the_sum_in_the_order_taken"],
        "timeout": 180,
    },
    {
        "name": "inc_reduce_float_sum_ignores_its_pipeline",
        "file": "hw/inc_reduce.py",
        "old": "            m.d.comb += inp.ready.eq(advance & ~hazard)\n",
        "new": "            m.d.comb += inp.ready.eq(advance)\n",
        "description": "the in-switch reduction takes a floating-point contribution to a slot whose "
                       "sum is still in the adder's pipeline: it reads the old partial sum and the "
                       "earlier contribution is lost",
        "tests": ["tests/hw/test_inc_reduce.py::"
                  "test_a_float_sum_takes_its_latency_and_a_slot_waits_for_its_sum"],
        "timeout": 180,
    },
    {
        "name": "fp_reference_sums_in_reverse",
        "file": "sw/lane_sums.py",
        "old": "        for v in x[1:]:\n",
        "new": "        for v in x[:0:-1]:\n",
        "description": "the checker's ordered sum adds the terms after the first in reverse: its "
                       "order is not the one the block took them in",
        "tests": ["tests/hw/test_inc_engine.py::test_rs_float_sums_follow_the_arrival_order",
                  "tests/sw/test_lane_sums.py::test_an_ordered_sum_is_the_order_s"],
        "timeout": 180,
    },
    {
        "name": "inc_ag_copy_to_root",
        "file": "hw/inc_engine.py",
        "old": "                        m.d.sync += mc_dst.eq(nxt(nxt(mc_dst)))\n",
        "new": "                        m.d.sync += mc_dst.eq(nxt(mc_dst))\n",
        "description": "the INC engine's AllGather multicast does not skip the root: the root gets "
                       "its own block back and another rank none",
        "tests": [
            "tests/hw/test_inc_engine.py::test_ag_multicast_to_all_but_root",
        ],
        "harmless": "the skip is dead logic: the multicast starts at root + 1 and stops after "
                    "N - 1 copies, in the cycle its next destination would be the root (ranks "
                    "root+1 .. root+N-1 are every rank but the root); the test sees the same "
                    "N - 1 destinations with or without it",
        "timeout": 120,
    },
    {
        "name": "inc_barrier_releases_early",
        "file": "hw/inc_engine.py",
        "old": "                    with m.If(arrivals == n - 1):\n",
        "new": "                    with m.If(arrivals == n - 2):\n",
        "description": "the INC engine releases a barrier on the (N-1)-th arrival, not the N-th",
        "tests": [
            "tests/hw/test_inc_engine.py::test_barrier_releases_every_nth_arrival",
        ],
        "timeout": 120,
    },
    {
        "name": "vector_count_partial_beat",
        "file": "hw/vector_unit.py",
        "old": "                m.d.sync += [s1_count[k].eq(popcount(hits[k])) for k in range(3)]\n",
        "new": "                m.d.sync += [s1_count[k].eq(popcount(hits[k]) + (last & (req.length - pos "
               "< lanes))) for k in range(3)]\n",
        "description": "VectorCount counts one element too many on a partial last beat",
        "tests": [
            "tests/sim/test_quaternary.py::test_demo_matches_numpy",
            "tests/sim/test_quaternary.py::test_experiment_rows_match_numpy",
        ],
        "timeout": 180,
    },
    {
        "name": "fence_one_cycle_early",
        "file": "hw/aiv_lsu.py",
        "old": "                    m.d.comb += ctl.hold.eq(outstanding != 0)\n",
        "new": "                    m.d.comb += ctl.hold.eq((outstanding != 0) & (outstanding != acked))\n",
        "description": "fence releases in the cycle the last acknowledgement arrives, one cycle "
                       "before the store window is counted empty",
        "tests": [
            "tests/hw/test_die.py::test_fence_waits_for_the_store_acknowledgement",
        ],
        "timeout": 120,
    },
    {
        "name": "poll_ge_is_gt",
        "file": "hw/aiv_lsu.py",
        "old": "                   Mux(cond == Cond.GT, x > y, x >= y)))))\n",
        "new": "                   Mux(cond == Cond.GT, x > y, x > y)))))\n",
        "description": "the core's 'ge' condition (poll, vcmp) tests x > y: a poll for a count "
                       "that has just been reached waits for one more",
        "tests": [
            "tests/sw/test_syncall.py::test_barrier_holds_every_core_until_the_last_arrives",
        ],
        "timeout": 120,
    },
    {
        "name": "alltoall_checks_flag_only",
        "file": "sw/kernels/alltoall.py",
        "old": "                    if not np.array_equal(got[s], want):\n",
        "new": "                    if got[s][0] != want[0]:\n",
        "description": "the alltoall checker compares only the flag word of each received block",
        "tests": [
            "tests/sw/test_alltoall.py::test_checker_sees_a_wrong_block",
        ],
        "timeout": 120,
    },
    {
        "name": "alltoall_duplicate_delivery",
        "file": "sw/kernels/alltoall.py",
        "old": "        p.stb(10, 2, 0)                                  # one atomic 512 B store\n",
        "new": "        p.stb(10, 2, 0)                                  # one atomic 512 B store\n"
               "        p.stb(10, 2, 0)\n",
        "description": "every alltoall sender delivers each block twice",
        "tests": [
            "tests/sw/test_alltoall.py::test_every_block_arrives_once_in_place",
        ],
        "timeout": 120,
    },
    {
        "name": "syncall_missing_arrival",
        "file": "sw/kernels/syncall.py",
        "old": "            p.li(4, e * aivs)\n",
        "new": "            p.li(4, e * aivs - 1)\n",
        "description": "a die's SyncAll leader waits for one arrival fewer than its cores: the last "
                       "core's arrival is missing from the barrier",
        "tests": [
            "tests/sw/test_syncall.py::test_barrier_waits_for_a_late_core",
        ],
        "timeout": 120,
    },
    {
        "name": "syncall_epoch_off_by_one",
        "file": "sw/kernels/syncall.py",
        "old": "        else:\n            p.li(9, e)\n",
        "new": "        else:\n            p.li(9, e - 1)\n",
        "description": "SyncAll's non-leader cores compare the release word with the previous "
                       "epoch (e - 1), so they leave before the barrier is released",
        "tests": [
            "tests/sw/test_syncall.py::test_barrier_waits_for_a_late_core",
        ],
        "timeout": 120,
    },
    {
        "name": "race_flag_before_payload",
        "file": "sim/lab/experiments/races.py",
        "old": "                       Step(5, 0, UBOp.WORD_WRITE, 0, 0, NEW_FLAG, fence=safe)),\n",
        "new": "                       Step(5, 0, UBOp.WORD_WRITE, 0, 0, NEW_FLAG, fence=False)),\n",
        "description": "the race catalog's stop-and-wait writer sends its Data-as-Flag word without "
                       "waiting for the payload's acknowledgement: the flag (short lane) lands "
                       "before its payload (long lane) in the safe variant too",
        "tests": [
            "tests/sim/test_races.py::test_flag_overtakes_data_only_without_fence",
        ],
        "timeout": 120,
    },
    {
        "name": "dc_marker_seven_words",
        "file": "sw/dataflag.py",
        "old": "    return int(leading_words(block).astype(np.uint64).sum() & _MASK32)\n",
        "new": "    return int(leading_words(block)[:7].astype(np.uint64).sum() & _MASK32)\n",
        "description": "the Data-for-Checksum marker sums seven of the eight leading words: a "
                       "stale last word of the flag field goes unnoticed",
        "tests": [
            "tests/hw/test_race.py::test_marker_is_dataflag_dc_marker",
            "tests/sw/test_dataflag.py",
        ],
        "timeout": 120,
    },
    {
        "name": "ubep_cumsum_offset",
        "file": "sw/ubep/ubep.py",
        "old": "        p.mv(1, 0)                                 # the prefix: tokens before (l0, 0)\n",
        "new": "        p.li(1, 1)                                 # the prefix: tokens before (l0, 0)\n",
        "description": "UBEP's CalCumSum starts its prefix at 1: every published offset is one "
                       "token late",
        "tests": [
            "tests/sw/test_dispatch.py::test_ubep_delivers_what_cann_delivers",
        ],
        "timeout": 240,
    },
    {
        "name": "combine_first_weight_skipped",
        "file": "sw/ubep/combine.py",
        "old": "            p.vmuls(10, 10, 11, 8)\n",
        "new": "            if i:\n                p.vmuls(10, 10, 11, 8)\n",
        "description": "the combine adds each token's first expert answer unweighted (w = 1 for "
                       "slot 0)",
        "tests": [
            "tests/sw/test_combine.py::test_combine_is_bit_exact_with_every_phase_marked[ubep]",
        ],
        "timeout": 300,
    },
    {
        "name": "mapper_pivots_unclamped",
        "file": "sw/mapper.py",
        "old": "        pivots = [min(lo + i * gap, hi) for i in (1, 2, 3)]\n",
        "new": "        pivots = [lo + i * gap for i in (1, 2, 3)]\n",
        "description": "the quaternary search does not clamp its pivots to R",
        "tests": [
            "tests/sw/test_mapper.py::test_every_target_matches_numpy",
            "tests/sim/test_quaternary.py::test_demo_matches_numpy",
        ],
        "harmless": "measured: without the clamp 59,669 lookups (1-300 experts, random and "
                    "skewed routings, every target) terminate in <= 6 steps and match numpy; a "
                    "pivot past R counts count(E < R) > target, so the search never leaves the "
                    "window, which still shrinks to ceil(w/4) < w",
        "timeout": 180,
    },
    {
        "name": "ubep_sp_no_rearm",
        "file": "sw/ubep/ubep.py",
        "old": "                p.stb(9, 15, 0)                    # re-arm the slot (local, atomic)\n",
        "new": "                pass\n",
        "description": "UBEP's Sentinel Polling reader copies a block but leaves its slot "
                       "un-armed (the next dispatch would see stale data as arrived)",
        "tests": [
            "tests/sw/test_dispatch.py::test_a_sync_variant_delivers_the_raw_tokens_tff_delivers",
        ],
        "timeout": 180,
    },
    {
        "name": "ubep_sw_no_fence",
        "file": "sw/ubep/ubep.py",
        "old": "        p.fence()                                  # then this T-AIV's flag on every rank\n",
        "new": "",
        "description": "UBEP's stop-and-wait sender writes its flags without fencing its token "
                       "stores first",
        "tests": [
            "tests/sw/test_dispatch.py::test_a_sync_variant_delivers_the_raw_tokens_tff_delivers",
        ],
        "harmless": "measured: still correct; a T-AIV's flag to a rank follows its token stores "
                    "to that rank on the same path, and links and switches keep a path's order, "
                    "so the flag cannot overtake the data on this fabric (as daf's nofence "
                    "control shows); the fence only costs time",
        "timeout": 180,
    },
    {
        "name": "moe_compute_no_acquire",
        "file": "sw/incmoe/program.py",
        "old": '            p.poll(10, 9, 8, "ge")              # acquire agReady >= j + 1\n',
        "new": "            p.nop()\n",
        "description": "INC-MoE's compute AIVs start a band without acquiring agReady (they read "
                       "gathered rows before they arrive)",
        "tests": ["tests/sw/test_moe_layer.py::test_small_case_is_correct_in_both_modes"],
        "timeout": 180,
    },
    {
        "name": "moe_no_local_reduction",
        "file": "sw/incmoe/program.py",
        "old": "            p.vadd(12, 12, 13, 0)\n",
        "new": "            p.nop()\n",
        "description": "INC-MoE's reducers store their own partial back without adding the "
                       "switch's sum (the root's local reduction is lost)",
        "tests": ["tests/sw/test_moe_layer.py::test_small_case_is_correct_in_both_modes"],
        "timeout": 180,
    },
    {
        "name": "moe_tail_split_skips_rows",
        "file": "sw/incmoe/program.py",
        "edits": [
            ("            self.add_rows(0, 1 + helpers)\n",
             "            self.add_rows(0, 2 + helpers)\n"),
            ("            self.add_rows(1 + g, 1 + n_ag)\n",
             "            self.add_rows(1 + g, 2 + n_ag)\n"),
        ],
        "description": "INC-MoE's tail assistance splits a tail band's rows with step B_AG + 2 "
                       "instead of B_AG + 1 (owner and helpers): row B_AG + 1 of a band, and one "
                       "per round after it, is never reduced (a band shows it only with more "
                       "than B_AG + 2 rows: 3 with one helper, 4 with two)",
        "tests": ["tests/sw/test_moe_tail.py::test_every_row_of_a_tail_band_is_reduced_once"],
        "timeout": 180,
    },
    {
        "name": "cube_drops_b",
        "file": "hw/aiv_inc.py",
        "old": '                words = [(k["a"] * ua.data.word_select(i, 32) + k["b"])[:32] for i in range(nwords)]\n',
        "new": '                words = [(k["a"] * ua.data.word_select(i, 32))[:32] for i in range(nwords)]\n',
        "description": "the cube unit computes a*x without the + b of the FFN surrogate",
        "tests": ["tests/hw/test_aiv_core.py::test_inc_program_results"],
        "timeout": 180,
    },
    {
        "name": "dispatch_checker_skips_counts",
        "file": "sw/kernels/dispatch.py",
        "old": "            if words != want:\n",
        "new": "            if False:\n",
        "description": "the dispatch checker no longer compares COUNTS with numpy (the "
                       "experiments would accept a run with wrong counts)",
        "tests": ["tests/sw/test_dispatch.py::test_the_checker_sees_wrong_counts_and_a_wrong_expand"],
        "timeout": 180,
    },
    {
        "name": "dispatch_checker_skips_expand",
        "file": "sw/kernels/dispatch.py",
        "old": "            if expand != slot_index(w.topk_idx[d]).reshape(-1).tolist():\n",
        "new": "            if False:\n",
        "description": "the dispatch checker no longer compares EXPAND (what the combine looks "
                       "tokens up by) with numpy",
        "tests": ["tests/sw/test_dispatch.py::test_the_checker_sees_wrong_counts_and_a_wrong_expand"],
        "timeout": 180,
    },
    {
        "name": "result_key_ignores_backend",
        "file": "sim/lab/results/cache.py",
        "old": '    text = json.dumps({"experiment": experiment, "point": point,\n',
        "new": '    text = json.dumps({"experiment": experiment, "point": {k: v for k, v in '
               'point.items() if k != "backend"},\n',
        "description": "the result cache's key leaves out the point's backend (speed's rows "
                       "would be one backend's, served for all)",
        "tests": ["tests/sim/test_reproduce.py::test_every_point_of_a_grid_has_its_own_key"],
        "timeout": 120,
    },
    {
        "name": "source_hash_misses_cpp",
        "file": "sim/lab/results/cache.py",
        "old": 'SOURCE_SUFFIXES = (".py", ".vlt", ".cpp", ".h")\n',
        "new": 'SOURCE_SUFFIXES = (".py", ".vlt")\n',
        "description": "the source hash ignores the native backend's C++ top: a change to it "
                       "reuses stale cached results",
        "tests": ["tests/sim/test_reproduce.py::test_the_source_hash_sees_every_source_file"],
        "timeout": 120,
    },
    {
        "name": "native_skips_busy_models",
        "file": "sim/backends/native_top.cpp",
        "old": "            skipped[k] = skip_idle && i.idle && *i.idle;\n",
        "new": "            skipped[k] = skip_idle && i.idle;\n",
        "description": "the native backend's C++ top skips the edge of every model that has an "
                       "idle output, idle or not",
        "tests": ["tests/sim/test_native.py::test_skipping_idle_links_and_dies_changes_nothing"],
        "timeout": 300,
    },
    {
        "name": "store_window_ignored",
        "file": "hw/aiv_lsu.py",
        "old": "        can_block = can_store & (outstanding < self.store_window)\n",
        "new": "        can_block = can_store\n",
        "description": "a block store ignores the store_window knob (a sender's staging buffers "
                       "never run out: distance-blind sending)",
        "tests": ["tests/sim/test_mechanisms.py::test_each_window_of_block_stores_costs_one_round_trip"],
        "timeout": 120,
    },
    {
        "name": "vector_extra_ignored",
        "file": "hw/aiv_vector.py",
        "old": "                vin.valid.eq((v_in < v_beats) & (v_wait == 0)),\n",
        "new": "                vin.valid.eq(v_in < v_beats),\n",
        "description": "a vector instruction starts its beats at once, whatever the vector_extra "
                       "knob (a vector op's issue cost lost)",
        "tests": ["tests/sim/test_mechanisms.py::test_every_vector_instruction_pays_the_vector_extra_knob",
                  "tests/hw/test_aiv_core.py::test_cycle_costs"],
        "timeout": 120,
    },
    {
        "name": "fp_cost_ignores_latency",
        "file": "hw/aiv_fp.py",
        "old": "                m.d.sync += f_out.eq(f_out + 1)\n"
               "                with m.If(fout.payload.last):\n"
               "                    m.d.comb += [ctl.leave.eq(1), ctl.advance.eq(1)]\n",
        "new": "                m.d.sync += f_out.eq(f_out + 1)\n"
               "            with m.If(fin.valid & fin.ready & fin.payload.last):\n"
               "                m.d.comb += [ctl.leave.eq(1), ctl.advance.eq(1)]\n",
        "description": "a floating-point vector instruction ends with its last beat into the fp "
                       "unit, not with its last result: the unit's latency is not paid and the "
                       "last results are lost",
        "tests": ["tests/hw/test_aiv_core.py::test_fp_program_results"],
        "timeout": 300,
    },
    {
        "name": "fp_bf16_ties_away",
        "file": "hw/fp_lanes.py",
        "old": "    up = lower[15] & (lower[:15].any() | upper[0])\n",
        "new": "    up = lower[15]\n",
        "description": "fp32 -> bf16 rounds ties away from zero instead of to even (not Ascend's "
                       "CAST_RINT): vfcastb and the combine's final cast",
        "tests": ["tests/hw/test_aiv_core.py::test_fp_program_results"],
        "timeout": 300,
    },
    {
        "name": "read_extra_ignored",
        "file": "hw/aiv_lsu.py",
        "old": "                    issue = (r_wait >= extra) | (insn.op == Opcode.LDBC)\n",
        "new": "                    issue = Const(1)\n",
        "description": "a read is offered at once, whatever the read_extra and poll_extra knobs "
                       "(a copy engine's start and a scalar read's cost lost)",
        "tests": ["tests/sim/test_mechanisms.py::test_every_read_pays_the_read_extra_knob",
                  "tests/hw/test_aiv_core.py::test_cycle_costs"],
        "timeout": 120,
    },
    {
        "name": "ldbc_pays_the_read_start",
        "file": "hw/aiv_lsu.py",
        "old": "                    issue = (r_wait >= extra) | (insn.op == Opcode.LDBC)\n",
        "new": "                    issue = r_wait >= extra\n",
        "description": "every block of a copy waits read_extra, as if each 512 B were a copy of "
                       "its own (the copy engine's one start per copy lost)",
        "tests": ["tests/sim/test_mechanisms.py::test_every_read_pays_the_read_extra_knob"],
        "timeout": 120,
    },
    {
        "name": "split_scan_drops_the_previous_count",
        "file": "sw/ubep/ubep.py",
        "old": "        p.add(3, 3, 4)\n",
        "new": "",
        "description": "a C-AIV of the split CalCumSum scan takes the previous chunk's last "
                       "offset as its prefix, without that entry's count (offsets one entry "
                       "short)",
        "tests": ["tests/sw/test_dispatch.py::test_mte_copies_and_the_split_scan_deliver_what_the_defaults_do"],
        "timeout": 300,
    },
    {
        "name": "mte_status_copy_trusts_a_stale_word",
        "file": "sw/ubep/cann.py",
        "old": "            p.bgeu(6, 13, f\"verified{q}\")       # the copy holds this run's flag\n",
        "new": "            p.j(f\"verified{q}\")\n",
        "description": "CANN's MTE Flag Verification accepts its copy of the status slice "
                       "without checking the flags (a word not yet of this run is never polled)",
        "tests": ["tests/sw/test_dispatch.py::test_mte_copies_and_the_split_scan_deliver_what_the_defaults_do"],
        "timeout": 300,
    },
    {
        "name": "mte_token_copy_trusts_a_missing_block",
        "file": "sw/ubep/ubep.py",
        "old": "                p.beq(11, 12, f\"got{q}_{_b}\")\n",
        "new": "                p.j(f\"got{q}_{_b}\")\n",
        "description": "UBEP's MTE reordering copies a token without checking its blocks' flags "
                       "in the copy (a block not yet arrived is copied as it is)",
        "tests": ["tests/sw/test_dispatch.py::test_mte_copies_and_the_split_scan_deliver_what_the_defaults_do"],
        "timeout": 300,
    },
    {
        "name": "read_extra_paid_once_a_poll",
        "file": "hw/aiv_lsu.py",
        "old": "                                     r_wait.eq(0),\n",
        "new": "",
        "description": "a poll's reads after its first do not wait poll_extra again (the "
                       "wait counter is never cleared)",
        "tests": ["tests/hw/test_aiv_core.py::test_every_read_of_a_poll_pays_poll_extra"],
        "timeout": 120,
    },
    {
        "name": "polls_pay_the_read_start",
        "file": "hw/aiv_lsu.py",
        "old": "                    extra = Mux(scalar_read, self.poll_extra, self.read_extra)\n",
        "new": "                    extra = self.read_extra\n",
        "description": "a scalar read of global memory (lw, fadd, each read of a poll) waits "
                       "the copy start read_extra instead of poll_extra (the two knobs one "
                       "again)",
        "tests": ["tests/hw/test_aiv_core.py::test_a_poll_pays_poll_extra_and_a_copy_read_extra"],
        "timeout": 120,
    },
    {
        "name": "copies_pay_the_poll_cost",
        "file": "hw/aiv_lsu.py",
        "old": "                    extra = Mux(scalar_read, self.poll_extra, self.read_extra)\n",
        "new": "                    extra = self.poll_extra\n",
        "description": "a copy's start (ldb) waits poll_extra, a scalar read's cost, instead of "
                       "read_extra",
        "tests": ["tests/hw/test_aiv_core.py::test_a_poll_pays_poll_extra_and_a_copy_read_extra"],
        "timeout": 120,
    },
    {
        "name": "store_window_limits_words",
        "file": "hw/aiv_lsu.py",
        "old": "                                                           can_store, can_block)),\n",
        "new": "                                                           can_block, can_block)),\n",
        "description": "word stores (flags, counts) are held by the block-store window too",
        "tests": ["tests/sim/test_mechanisms.py::test_word_stores_do_not_see_the_window"],
        "timeout": 120,
    },
    {
        "name": "syncall_ignores_wait",
        "file": "hw/die.py",
        "old": "        go = arrived & (waited >= syncall_cycles)\n",
        "new": "        go = arrived\n",
        "description": "the die's barrier releases as soon as the last core arrives, whatever "
                       "the syncall_cycles knob (a free hardware SyncAll)",
        "tests": ["tests/sim/test_mechanisms.py::test_the_hardware_syncall_releases_its_wait_after_the_last_arrival"],
        "timeout": 120,
    },
    {
        "name": "syncall_releases_at_the_first_arrival",
        "file": "hw/die.py",
        "old": "        arrived = (Cat(c.bar_req | ~c.running for c in cores).all()\n",
        "new": "        arrived = (Cat(c.bar_req | ~c.running for c in cores).any()\n",
        "description": "the die's barrier opens when any core reaches it, not every running one",
        "tests": ["tests/sim/test_mechanisms.py::test_each_die_has_its_own_barrier_and_it_can_be_reused"],
        "timeout": 120,
    },
    {
        "name": "injection_limit_ignored",
        "file": "hw/die.py",
        "old": "        ok = (rate == 0) | (credit >= cost)\n",
        "new": "        ok = 1\n",
        "description": "the die sends whatever its links take, whatever the inject_rate knob",
        "tests": ["tests/sim/test_mechanisms.py::test_the_injection_limit_sets_the_dies_egress"],
        "timeout": 120,
    },
    {
        "name": "zipf_weights_ignored",
        "file": "sw/routing.py",
        "old": "        weight = np.arange(1, experts + 1, dtype=float) ** -zipf\n",
        "new": "        weight = np.ones(experts)\n",
        "description": "zipf routing draws experts uniformly (a skewed workload that is not)",
        "tests": ["tests/sw/test_routing.py::test_zipf_weights_fall_as_a_power_of_the_id"],
        "timeout": 60,
    },
    {
        "name": "consecutive_hot_experts_spread",
        "file": "sw/routing.py",
        "old": "    if layout == \"consecutive\":\n        return list(range(hot))\n",
        "new": "",
        "description": "hot_layout='consecutive' puts the hot experts at spread ids",
        "tests": ["tests/sw/test_routing.py::test_consecutive_hot_experts_sit_on_the_first_ranks"],
        "timeout": 60,
    },
    {
        "name": "die_idle_while_cores_run",
        "file": "hw/die.py",
        "old": "            quiet = Cat(~c.running & (c.outstanding == 0) for c in cores).all()\n",
        "new": "            quiet = Cat(c.outstanding == 0 for c in cores).all()\n",
        "description": "a die says it is idle while its cores run (the native backend would "
                       "freeze them)",
        "tests": ["tests/hw/test_die.py::test_idle_means_the_next_edge_changes_nothing"],
        "timeout": 120,
    },
    {
        "name": "router_idle_ignores_owed_acks",
        "file": "hw/router.py",
        "old": "                                      self.ub_rsp.valid, host.we, host.re, acks.ack.valid).any()\n",
        "new": "                                      self.ub_rsp.valid, host.we, host.re).any()\n",
        "description": "a die's router says it is idle while it owes a store ack (still in the "
                       "ack FIFO)",
        "tests": ["tests/hw/test_die.py::test_idle_means_the_next_edge_changes_nothing"],
        "timeout": 120,
    },
    {
        "name": "planar_switch_planes_reversed",
        "file": "hw/switch.py",
        "old": "                     [f\"dp{k}_out{o}\" for k in reversed(planes)] + \\\n",
        "new": "                     [f\"dp{k}_out{o}\" for k in planes] + \\\n",
        "description": "the native backend's planar switch (a 16-port switch of 512 B flits) "
                       "reassembles its data planes in the wrong order",
        "tests": ["tests/sim/test_native.py::test_planar_switches_are_the_same_switches"],
        "timeout": 300,
    },
    {
        "name": "planar_inc_plane_writes_on_release_only",
        "file": "hw/inc_reduce.py",
        "old": "            wr.en.eq(end[\"take\"]), wr.data.eq(Mux(end[\"release\"], 0, summed)),\n",
        "new": "            wr.en.eq(end[\"release\"]), wr.data.eq(Mux(end[\"release\"], 0, summed)),\n",
        "description": "a data plane of the native backend's planar in-network switch keeps a "
                       "partial sum only when its group is released (so every sum but the last "
                       "contribution is lost)",
        "tests": ["tests/hw/test_inc_switch.py::test_the_planar_form_is_the_same_switch"],
        "timeout": 180,
    },
    {
        "name": "ubep_inc_wide_mask_high_word_unselected",
        "file": "sw/ubep/ubep_inc.py",
        "old": "        p.sub(e, 0, e)\n",
        "new": "        p.mv(e, e)\n",
        "description": "UBEP-INC's two-word die mask (past 32 dies) selects the high word with "
                       "the die's word index (0 or 1) instead of all ones, so a die of 32..63 "
                       "keeps only bit 0 of its bit",
        "tests": ["tests/sw/test_ubep_inc.py::test_a_two_word_die_mask_and_a_die_taken_out"],
        "timeout": 120,
    },
    {
        "name": "core_ignores_the_high_mask_register",
        "file": "hw/aiv_lsu.py",
        "old": "                        dies = Cat(b, c) if ep_mask_bits(self.ep_dies) > 32 else b\n",
        "new": "                        dies = Cat(b, Const(0, 32)) if ep_mask_bits(self.ep_dies) > 32 "
               "else b\n",
        "description": "a core of a machine of more than 32 dies sends a stbm/stbr to dies 0..31 "
                       "only (R[rs3], the mask's bits 32..63, is ignored)",
        "tests": ["tests/hw/test_aiv_core.py::test_past_32_dies_a_stbm_mask_is_two_registers"],
        "timeout": 120,
    },
    {
        "name": "pysim_kept_simulator_not_reset",
        "file": "sim/backends/pysim.py",
        "old": "        sim.reset()\n",
        "new": "        pass\n",
        "description": "Amaranth's simulator kept for a backend's next run is not reset (the run "
                       "would start from the previous one's state)",
        "tests": ["tests/sim/test_backends.py::test_a_kept_pysim_simulator_starts_from_the_initial_state"],
        "timeout": 120,
    },
    {
        "name": "dispatch_machine_ignores_the_vector_width",
        "file": "sw/kernels/dispatch.py",
        "old": "                                     lanes=pr.vector_lanes, hbm_blocks=hbm_blocks,\n",
        "new": "                                     lanes=16, hbm_blocks=hbm_blocks,\n",
        "description": "the MoE kernels' machine is built with 16-lane cores whatever the "
                       "preset's vector_lanes (the Ascend vector width would not reach the "
                       "hardware)",
        "tests": ["tests/sw/test_dispatch.py::test_the_presets_vector_width_builds_the_cores_and_"
                  "shortens_canns_counting"],
        "timeout": 180,
    },
    {
        "name": "router_rank_field_fixed_at_8_bits",
        "file": "hw/router_core.py",
        "old": "        addr = data.View(address_layout(self.rank_bits), req.payload.addr)\n",
        "new": "        addr = data.View(address_layout(), req.payload.addr)\n",
        "description": "the die router decides local/remote from the default 8-bit rank field "
                       "whatever the machine's rank_bits (the narrowed addresses)",
        "tests": ["tests/sw/test_dispatch.py::test_a_one_bit_rank_field_gives_the_same_run",
                  "tests/hw/test_router.py::test_a_narrow_rank_field_routes_by_the_top_bits"],
        "timeout": 300,
    },
    {
        "name": "cann_flag_accepts_previous_epoch",
        "file": "sw/ubep/cann.py",
        "old": ("        p.li(14, lay.address(rank, block, word))\n"
                "        p.poll(6, 14, 13, \"ge\")                 # the flag carries this run's epoch\n"),
        "new": ("        p.li(14, lay.address(rank, block, word))\n"
                "        p.li(7, 1 << 16)\n"
                "        p.sub(7, 13, 7)\n"
                "        p.poll(6, 14, 7, \"ge\")\n"),
        "description": "CANN's Flag Verification accepts a status word of the previous epoch "
                       "(epoch - 1): it reads counts that have not arrived",
        "tests": ["tests/sw/test_combine.py::test_correct_at_cm384_latencies"],
        "timeout": 300,
    },
    {
        "name": "cann_update_without_syncall3",
        "file": "sw/ubep/cann.py",
        "old": "        _syncall(p, rank, lay, aivs, 3, hard=hard)\n",
        "new": "",
        "description": "CANN's UpdateTokenNumsOut without SyncAll #3: the last AIV reads the "
                       "running totals while the others may still be writing them",
        "tests": ["tests/sw/test_dispatch.py::test_two_experts_a_rank_end_with_update_token_nums_out"],
        "timeout": 120,
    },
    {
        "name": "cann_toknums_one_read_an_expert",
        "file": "sw/ubep/cann.py",
        "old": "        if e_l:\n            block, word = lay.word_at(lay.SENDCNT, (e_l - 1) * R + R - 1)\n",
        "new": "        if False:\n            block, word = lay.word_at(lay.SENDCNT, (e_l - 1) * R + R - 1)\n",
        "description": "CANN's last AIV reads only each expert's own running total: TOKNUMS "
                       "holds the running totals, and the update costs one read an expert less",
        "tests": ["tests/sim/test_mechanisms.py::test_canns_update_token_nums_pays_a_scalar_read_per_running_total",
                  "tests/sw/test_dispatch.py::test_dispatch_is_bit_exact_with_every_phase_marked"],
        "timeout": 120,
    },
    {
        "name": "ubep_token_blocks_without_header_room",
        "file": "sw/kernels/dispatch.py",
        "old": "    return blocks_per_token(nbytes, tff=system != \"cann\")\n",
        "new": "    return blocks_per_token(nbytes, tff=False)\n",
        "description": "UBEP's token of hidden_bytes takes CANN's block count, as if its blocks "
                       "carried 512 B of payload beside their Token-Flag-Fusion header",
        "tests": ["tests/sw/test_dispatch.py::test_a_tokens_bytes_set_each_systems_blocks",
                  "tests/sim/test_mechanisms.py::test_ubeps_tokens_take_the_blocks_their_headers_need"],
        "timeout": 120,
    },
    {
        "name": "send_buffers_counted_in_blocks",
        "file": "sw/machine.py",
        "old": "            out[\"store_window\"] = n * self.token_blocks\n",
        "new": "            out[\"store_window\"] = n\n",
        "description": "a preset's send_buffers become a store window of that many blocks, not "
                       "tokens",
        "tests": ["tests/sw/test_machine.py::test_send_buffers_make_the_store_window_whole_tokens",
                  "tests/sw/test_dispatch.py::test_a_dispatch_with_send_buffers_runs_a_window_of_its_tokens",
                  "tests/sim/test_mechanisms.py::test_a_senders_token_buffers_are_a_window_of_whole_tokens"],
        "timeout": 180,
    },
    {
        "name": "cann_ascend_count_as_one_vcount",
        "file": "sw/ubep/cann.py",
        "old": "    if count == \"ascend\":\n        count_ascend(p, 6, 1, 5, 8, 11)",
        "new": "    if False:\n        count_ascend(p, 6, 1, 5, 8, 11)",
        "description": "CANN's slot index under cann_count='ascend' counted by one vcount "
                       "(the model's fused count) instead of the open kernel's five vector "
                       "instructions",
        "tests": ["tests/sim/test_mechanisms.py::test_canns_count_as_the_open_kernels_five_vector_instructions"],
        "timeout": 120,
    },
    {
        "name": "eq8_ratio_inverted",
        "file": "sw/ubep/ubep.py",
        "old": "    c = round(ratio * aivs * experts / (topk * batch))\n",
        "new": "    c = round(aivs * experts / (ratio * topk * batch))\n",
        "description": "Eq. 8's group size with α/β in place of β/α",
        "tests": ["tests/sw/test_dispatch.py::test_eq8_chooses_c_from_the_models_own_slopes"],
        "timeout": 120,
    },
    {
        "name": "ubep_reorder_polls_first_block_only",
        "file": "sw/ubep/ubep.py",
        "old": ("            if sync == \"tff\":\n"
                "                p.poll(11, 15, 12, \"eq\")           # Data-as-Flag: this block has arrived\n"),
        "new": ("            if sync == \"tff\" and _b == 0:\n"
                "                p.poll(11, 15, 12, \"eq\")\n"),
        "description": "UBEP's Token-Reordering polls the Data-as-Flag word of a token's first "
                       "block only and copies the others as they are",
        "tests": ["tests/sw/test_combine.py::test_correct_at_cm384_latencies"],
        "timeout": 300,
    },
    {
        "name": "combine_reads_block_0_only",
        "file": "sw/ubep/combine.py",
        "old": "            p.addi(6, 6, b)\n",
        "new": "            p.addi(6, 6, 0)\n",
        "description": "the combine sums block 0 of every answer into each block of the "
                       "token's output row",
        "tests": ["tests/sw/test_combine.py::test_correct_at_cm384_latencies"],
        "timeout": 300,
    },
    {
        "name": "ubep_tcnt_no_flag_poll",
        "file": "sw/ubep/ubep.py",
        "old": ("        p.li(14, lay.address(rank, lay.TCNT + blk))\n"
                "        p.poll(5, 14, 13, \"eq\")\n"),
        "new": "        p.li(14, lay.address(rank, lay.TCNT + blk))\n",
        "description": "a UBEP T-AIV reads a peer's TCNT counts block without polling its "
                       "Token-Flag-Fused flag word",
        "tests": ["tests/sw/test_dispatch.py::test_ubep_token_aivs_wait_for_each_others_counts"],
        "timeout": 300,
    },
    {
        "name": "link_counter_ignores_small",
        "file": "hw/topology.py",
        "old": "                blocks.append(fire if tap is None else fire & ~tap)\n",
        "new": "                blocks.append(fire)\n",
        "description": "the fabric's per-link-kind block counters count small (control) "
                       "flits as data blocks",
        "tests": ["tests/hw/test_system.py::test_shared_switch_modules_route_as_the_constant_switches"
                  "[pysim]"],
        "timeout": 300,
    },
    {
        "name": "tier1_sums_groups_leaving_the_board",
        "file": "hw/topology.py",
        "old": "                            sums=[board_of(d) == b for d in range(ranks)])\n",
        "new": "                            sums=None)\n",
        "description": "a tier-1 in-network switch also sums groups whose destination is on "
                       "another board: its unit releases up and down, and two boards can wait "
                       "on each other through a tier-2 plane (docs/concepts/inc-deadlock.md)",
        "tests": ["tests/hw/test_inc_waits.py::test_the_in_network_superpod_has_no_cyclic_wait",
                  "tests/hw/test_topology.py::test_inc_superpod_multicast_and_reductions_under_stalls"],
        "timeout": 300,
    },
    {
        "name": "link_counter_misses_a_link",
        "file": "hw/topology.py",
        "old": "                if self.link_kinds[n] != kind:\n",
        "new": "                if self.link_kinds[n] != kind or n == len(self.links) - 1:\n",
        "description": "the fabric's per-link-kind counters skip the last link (a tier-2 "
                       "downlink of the superpod)",
        "tests": ["tests/hw/test_topology.py::test_random_traffic_scoreboard"],
        "timeout": 300,
    },
    {
        "name": "sampler_interval_plus_one",
        "file": "hw/system.py",
        "old": "            m.d.sync += until.eq(Mux(until == 0, every - 1, until - 1))\n",
        "new": "            m.d.sync += until.eq(Mux(until == 0, every, until - 1))\n",
        "description": "the counter sampler takes a sample every sample_every + 1 cycles",
        "tests": ["tests/hw/test_system.py::test_sampler_samples_the_live_counters_at_exact_cycles",
                  "tests/hw/test_system.py::test_sampler_stops_when_full_and_counts_the_dropped"],
        "timeout": 120,
    },
    {
        "name": "ub_commit_counter_words_as_blocks",
        "file": "hw/die.py",
        "old": "        with m.Elif(taken & block):\n",
        "new": "        with m.Elif(taken):\n",
        "description": "a die's UB commit counters count word stores and fetch-adds as block "
                       "commits",
        "tests": ["tests/hw/test_system.py::test_sampler_samples_the_live_counters_at_exact_cycles"],
        "timeout": 120,
    },
    {
        "name": "rate_track_shows_the_cumulative_count",
        "file": "sw/report.py",
        "old": "                            (v1 - v0) * scale / ((c1 - c0) * cycle_ns / 1000.0))\n",
        "new": "                            v1 * scale / ((c1 - c0) * cycle_ns / 1000.0))\n",
        "description": "a sampled counter's rate track divides the cumulative count, not the "
                       "interval's increase, by the interval",
        "tests": ["tests/sw/test_report.py::test_sampled_counters_become_rate_tracks_between_samples",
                  "tests/sw/test_report.py::test_many_samples_merge_into_at_most_max_rate_steps_exactly"],
        "timeout": 120,
    },
]
