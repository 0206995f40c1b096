#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""make check-mutants: break each mechanism the tests claim, one at a time,
and check that a test that claims it notices.

Each entry of MUTANTS is one line of the sources, found by a pattern that
must occur exactly once in the files its glob names (daemon/*.c, not one
file and line: files are split and lines move), what that line becomes,
and the tests that claim the mechanism: "unit:NAME" (build/unit NAME) or
"test_file.test_name" (tests/run.py). Adding a mechanism is adding an
entry.

How a run goes, in throwaway copies of the tree, one per worker
(BUILD/mutants/tree1, tree2, ...: the working tree's files, their list in
MANIFEST as a copy is no git checkout, and a copy of BUILD with its
timestamps, so that make rebuilds only what a mutant changes, through its
dependency files); each worker takes the next test or mutant in its own
copy, so that one mutant's tests run while another's build or wait (on
2 cores, 88 mutants took 1,294 s with one worker, 852 s with two):
 1. the list is checked: each pattern matches one line, each test name
    one test (the unit binary's filter and tests/run.py's -k are
    substrings: a name must be a whole test's name);
 2. the baseline: the unchanged copy is built and every named test run
    once; if one fails or skips there, the run stops (exit 1): a test that
    fails without a mutant proves nothing about one. With --passed FILE
    (the test-times.tsv of a suite run that passed on this very build, as
    CI's lone clone writes it), the tests it names are taken as passed
    with its times and only the others are run;
 3. each mutant: its line changed, and only what its named tests run
    rebuilt (nothing for a Python mutant, build/unit for a unit test,
    build/l2drive for test_l2_live's; a mutant that does not build is an
    error of the list, never a kill), its named tests run one after
    another, the fastest first, until one fails. "killed" only when a
    named test's own result is a failure (or it crashed or hung, alone in
    its run: a unit test alone in build/unit, a test alone under run.py,
    past five times its baseline time); "survived" when each passed. Then
    the line is put back (the next build recompiles that file).
Ends with a table; exits 1 if the baseline failed or any mutant survived
or erred. Not part of make test: .ci/run runs it after the suite.

usage: tests/tools/mutants.py [--build DIR] [--only NAME,...] [--workers N]
                             [--passed FILE] [--list]
  --only      these mutants alone (their tests alone in the baseline)
  --workers   copies of the tree worked in at once (default 2)
  --passed    the times of a suite run that passed on this build: the
              baseline of the tests it names
"""
import argparse
import glob
import os
import queue
import re
import shutil
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Callable, Dict, List, NamedTuple, Optional, Sequence, Tuple, TypeVar

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


class Mutant(NamedTuple):
    name: str
    mechanism: str
    files: str          # glob, relative to the tree
    find: str           # an exact substring: exactly one line holds it
    replace: str        # what that substring becomes in that line
    tests: Tuple[str, ...]   # "unit:NAME" (build/unit NAME) or a tests/run.py -k substring


MUTANTS: List[Mutant] = [
    # The slot hash's tag rule (daemon/l2_cluster.c).
    Mutant("tag-empty-counts", "slot hash tag rule: an empty {} is a tag", "daemon/*.c",
           "if (close && close > open + 1)", "if (close)",
           ("unit:cluster_slot_vectors",)),
    Mutant("tag-close-before-open", "slot hash tag rule: a '}' before the '{' closes it",
           "daemon/*.c", "close = memchr(open + 1, '}', rest);", "close = memchr(k, '}', len);",
           ("unit:cluster_slot_vectors",)),
    Mutant("tag-unmatched-brace", "slot hash tag rule: an unmatched '{' opens a tag",
           "daemon/*.c", "close = memchr(open + 1, '}', rest);",
           "close = memchr(open + 1, '}', rest); "
           "if (!close && rest) return crc16(open + 1, rest) & (CLUSTER_SLOTS - 1);",
           ("unit:cluster_slot_vectors",)),
    # Silence detection (daemon/l2.c's command timer).
    Mutant("silence-never-detected", "silence detection: a silent connection counts as moving",
           "daemon/*.c", "(progress_of(cmd->ac) != cmd->seen || (q >= 0 && q < cmd->outq) ||",
           "(1 || (q >= 0 && q < cmd->outq) ||",
           ("test_l2_silence.test_l2_throttled_transfer_outlives_the_timeout_stall_does_not",)),
    Mutant("silence-progress-unseen", "silence detection: bytes moving are not seen",
           "daemon/*.c", "(progress_of(cmd->ac) != cmd->seen || (q >= 0 && q < cmd->outq) ||",
           "(0 ||",
           ("test_l2_silence.test_l2_throttled_transfer_outlives_the_timeout_stall_does_not",
            "test_l2_chunks.test_l2_values_of_1_to_100_mb_cross_on_the_default_timeout")),
    Mutant("silence-no-cap", "silence detection: no cap on a command whose bytes trickle",
           "daemon/*.c", "int too_long = now - cmd->sent_us > max_ms * 1000;", "int too_long = 0;",
           ("test_l2_silence.test_l2_a_trickle_never_silent_for_the_timeout_still_ends",)),
    # The autostart lock (client/autostart.c).
    Mutant("autostart-no-lock", "autostart lock: every client starts a daemon", "client/*.c",
           "flock(lock, LOCK_EX | LOCK_NB) < 0;)", "0;)",
           ("test_idle.test_fronts_start_one_daemon_of_the_users_own_which_exits_idle",)),
    Mutant("autostart-no-recheck", "autostart lock: the lock's waiter does not look again",
           "client/*.c", "if (answers(socket)) {          /* another client started it meanwhile */",
           "if (0) {",
           ("test_idle.test_fronts_start_one_daemon_of_the_users_own_which_exits_idle",)),
    # The breaker (daemon/l2.c).
    Mutant("breaker-never-opens", "breaker: failures never open it", "daemon/*.c",
           "else if (++nd->failures >= L2_TRIP)", "else if (++nd->failures >= L2_TRIP * 1000)",
           ("test_l2_silence.test_l2_throttled_transfer_outlives_the_timeout_stall_does_not",
            "test_l2_live.test_l2_redis_stopped_breaker_and_recovery")),
    Mutant("breaker-open-admits", "breaker: an open breaker lets requests through", "daemon/*.c",
           "if (now_us() < nd->open_until_us)", "if (0)",
           ("test_l2_silence.test_l2_throttled_transfer_outlives_the_timeout_stall_does_not",
            "test_l2_live.test_l2_redis_stopped_breaker_and_recovery")),
    # Chunk verification (daemon/l2.c).
    Mutant("chunk-length-unchecked", "chunk verification: a chunk's length", "daemon/*.c",
           "if (r->len != len + L2_TAG_LEN) {", "if (0) {",
           ("test_l2_chunks.test_l2_tampered_missing_or_foreign_chunks_and_manifests_are_misses",)),
    Mutant("chunk-unopened", "chunk verification: each chunk opened at its position",
           "daemon/*.c", "(unsigned char *)r->str + len) < 0) {",
           "(unsigned char *)r->str + len) < -1) {",
           ("test_l2_chunks.test_l2_tampered_missing_or_foreign_chunks_and_manifests_are_misses",)),
    Mutant("chunk-manifest-unbounded", "chunk verification: a manifest past l2-max-value",
           "daemon/*.c", "if (*total > (uint64_t)max_value)", "if (0)",
           ("test_l2_chunks.test_l2_a_manifest_cannot_make_a_reader_fetch_past_its_max_value",)),
    Mutant("chunk-writer-unbounded", "chunk verification: a writer past l2-max-value",
           "daemon/*.c", "(int64_t)(rec_len + L2_HEAD + L2_TAG_LEN) > l2->conf->max_value) {", "0) {",
           ("test_l2_chunks.test_l2_a_manifest_cannot_make_a_reader_fetch_past_its_max_value",)),
    # The tier's AEAD (daemon/l2.c): what a Redis reader sees, and what a
    # writer without the secret can move.
    Mutant("aead-plaintext", "AEAD: values stored in the clear", "daemon/*.c",
           "ok = EVP_CipherUpdate(c, out + off, &n, in + off, (int)k) == 1 && (size_t)n == k;",
           "memmove(out + off, in + off, k); n = (int)k;",
           ("test_l2_seal.test_l2_marker_in_values_is_nowhere_in_redis",)),
    Mutant("aead-name-unbound", "AEAD: the key's name left out of the associated data",
           "daemon/*.c",
           "EVP_CipherUpdate(c, NULL, &n, (const unsigned char *)name, (int)name_len) == 1;",
           "EVP_CipherUpdate(c, NULL, &n, (const unsigned char *)name, 0) == 1;",
           ("unit:l2_envelope_tampering",
            "test_l2_seal.test_l2_values_moved_to_another_key_or_scope_are_rejects")),
    # The tier's chunks, seal and secrets (daemon/l2.c, l2_seal.c, l2_conf.c,
    # config.c, manage.c): the pipeline window, a missing chunk a miss, each chunk's index in
    # its nonce and associated data, HKDF over scope and id, version-1
    # values misses, the secret never logged, every URL shown redacted.
    Mutant("l2-window-unbounded", "tier chunks: a reader's chunks in flight not bounded by the window",
           "daemon/l2.c", "x->sent < x->n_chunks && x->sent - x->done < window)",
           "x->sent < x->n_chunks && 1)",
           ("test_l2_chunks.test_l2_a_reader_keeps_at_most_a_window_of_chunks_in_flight",)),
    Mutant("l2-missing-chunk-rejected", "tier chunks: a chunk gone is a reject, not a miss",
           "daemon/l2.c", "size_t off, len = chunk_span(x, i, &off);",
           "size_t off, len = chunk_span(x, i, &off); if (r->type == REDIS_REPLY_NIL || "
           "(r->type == REDIS_REPLY_STRING && r->len == 0)) { reject(x, \"gone\"); return; }",
           ("test_l2_chunks.test_l2_a_chunk_spoiled_past_the_first_window_or_during_the_fetch_is_a_miss",
            "test_l2_chunks.test_l2_tampered_missing_or_foreign_chunks_and_manifests_are_misses")),
    Mutant("l2-chunk-nonce-index-dropped", "tier seal: a chunk's index left out of its nonce",
           "daemon/l2_seal.c", "put_be(nonce + 8, index, 4);", "put_be(nonce + 8, 0, 4);",
           ("test_l2_chunks.test_l2_chunked_layout_is_the_documented_one",)),
    Mutant("l2-chunk-ad-index-dropped", "tier seal: a chunk's index left out of its associated data",
           "daemon/l2_seal.c", "put_be(ad + L2_HEAD, i, 4);", "put_be(ad + L2_HEAD, 0, 4);",
           ("test_l2_chunks.test_l2_chunked_layout_is_the_documented_one",)),
    Mutant("l2-hkdf-scope-dropped", "tier seal: a value's key the same in every scope",
           "daemon/l2_seal.c", "memcpy(info + n, scope, scope_len);", "memset(info + n, 0, scope_len);",
           ("unit:l2_value_key_is_hkdf_of_scope_and_id",)),
    Mutant("l2-hkdf-id-dropped", "tier seal: a value's key the same for every id",
           "daemon/l2_seal.c", "memcpy(info + n, id, L2_ID_LEN);", "memset(info + n, 0, L2_ID_LEN);",
           ("unit:l2_value_key_is_hkdf_of_scope_and_id",)),
    Mutant("l2-version-1-rejected", "tier seal: a value of version 1 is a reject, not a miss",
           "daemon/l2_seal.c", "if (p[4] == L2_OLD_VERSION)", "if (0)",
           ("unit:l2_envelope_tampering",
            "test_l2_live.test_l2_tampered_values_rejected")),
    Mutant("l2-secret-logged", "tier secrets: the secret file's bytes written to the log",
           "daemon/l2_conf.c", "memcpy(l2->secret, tmp, n);",
           "memcpy(l2->secret, tmp, n), fprintf(stderr, \"l2: secret %.*s\\n\", (int)n, "
           "(const char *)tmp);",
           ("test_secrets.test_secrets_the_log_shows_no_password",)),
    Mutant("l2-url-unredacted-print-config", "tier secrets: --print-config shows the URL's password",
           "daemon/config.c", "l2_url_redacted(*(const char *const *)field, &shown);",
           "buf_puts(&shown, *(const char *const *)field);",
           ("test_secrets.test_secrets_print_config_shows_the_password_as_stars",)),
    Mutant("l2-url-unredacted-stats", "tier secrets: stats show the URL's password",
           "daemon/manage.c", "l2_url_redacted(s->cfg->l2_url, &url);",
           "buf_puts(&url, s->cfg->l2_url);",
           ("test_secrets.test_secrets_stats_and_status_show_the_password_as_stars",)),
    Mutant("l2-url-unredacted-errors", "tier secrets: a URL refused is shown with its password",
           "daemon/l2_conf.c", "l2_url_redacted(url, &shown);", "buf_puts(&shown, url);",
           ("test_secrets.test_secrets_errors_show_no_password",)),
    Mutant("l2-url-unredacted-log", "tier secrets: the log names a server with its password",
           "daemon/l2_conf.c", "l2_url_redacted(full.data, shown);", "buf_puts(shown, full.data);",
           ("test_secrets.test_secrets_the_log_shows_no_password",)),
    # Large values' blob files (daemon/store.c, store_admin.c, store_blobs.c,
    # conn.c).
    Mutant("blob-checksum-unchecked", "blob files: served without their checksum", "daemon/*.c",
           'if ((int64_t)XXH64(out->log.data ? out->log.data : "", out->log.len, hash) != sum) {',
           "if (0) {",
           ("test_large.test_a_damaged_blob_file_is_a_miss_counted_never_served_and_dropped",)),
    Mutant("waiters-hash-each", "a put's waiters each hash its fresh file", "daemon/*.c",
           "b->together && seen_is(&b->fresh, &st) ? &b->fresh : NULL;", "NULL;",
           ("test_large.test_the_waiters_of_a_put_are_answered_from_one_hash_of_its_file",)),
    Mutant("verify-no-orphans", "verify: blob files no entry names left alone", "daemon/*.c",
           "problems += blobs_sweep(s->blobs, row_names_file, s, report);", "(void)report;",
           ("test_large.test_verify_removes_and_reports_blob_files_no_entry_names_for_the_admin_alone",)),
    Mutant("verify-orphans-for-all", "verify: any uid's verify removes orphans", "daemon/*.c",
           "if (!f || filter_is_all(f))", "if (1)",
           ("test_large.test_verify_removes_and_reports_blob_files_no_entry_names_for_the_admin_alone",)),
    Mutant("blob-no-sweep", "blob files: no sweep of orphans at open", "daemon/*.c",
           "blobs_sweep(s->blobs, row_names_file, s, NULL);", "(void)row_names_file;",
           ("test_large.test_a_kill_9_anywhere_in_large_puts_leaves_no_orphan_and_no_row_without_its_file",)),
    Mutant("blob-fds-unbounded", "descriptors: no bound on those in flight", "daemon/*.c",
           "!= 0 || fds_at_bound(c))", "!= 0)",
           ("test_large.test_descriptors_in_flight_are_bounded_per_connection_then_values_go_inline",)),
    Mutant("blob-fds-never-again", "descriptors: the bound never starts again", "daemon/*.c",
           "c->fds_unread = 0;", "return 1;",
           ("test_large.test_descriptors_in_flight_are_bounded_per_connection_then_values_go_inline",
            "test_large.test_a_client_that_reads_keeps_getting_descriptors_however_many_it_holds")),
    # Large values (daemon/store_put.c, store_files.c, store_blobs.c): the
    # spool's disk-full retry and its refusal of a value larger than all the room; a removed file
    # unlinked, never truncated; a remembered hash and a file's size checked.
    Mutant("spool-no-disk-retry", "a spool that fills the disk fails without making room",
           "daemon/*.c", "if (!full || sp->retried || s->batch)", "if (1)",
           ("test_large.test_a_disk_that_fills_inside_a_large_puts_spool_makes_room_once_or_refuses_cleanly",)),
    Mutant("spool-too-large-evicts", "a spooled value larger than all the room evicts before it is refused",
           "daemon/*.c", "+ s->bytes + (int64_t)sp->got <", "+ s->bytes + (int64_t)sp->got < 0 *",
           ("test_large.test_a_disk_that_fills_inside_a_large_puts_spool_makes_room_once_or_refuses_cleanly",)),
    Mutant("blob-removal-truncates", "a removed entry's file truncated before its unlink",
           "daemon/store_blobs.c", "/* (The log is the loop's: a failure here is left to the sweep.) */",
           "{ (void)fchmodat(b->dfd, name, 0600, 0); int t = openat(b->dfd, name, O_WRONLY | O_CLOEXEC); "
           "if (t >= 0) { if (ftruncate(t, 0) < 0) {} close(t); } }",
           ("test_large.test_a_value_libptxcache_mapped_keeps_its_bytes_when_its_entry_is_evicted_and_purged",
            "test_large.test_a_value_held_while_evicted_or_purged_keeps_its_bytes_and_its_space_comes_back")),
    Mutant("blob-seen-never-stale", "a remembered hash trusted for a file changed since",
           "daemon/store_blobs.c", "return s->used && s->dev == st->st_dev && s->ino == st->st_ino &&",
           "return s->used && s->dev == st->st_dev && s->ino == st->st_ino; return 0 &&",
           ("test_large.test_a_damaged_blob_file_is_a_miss_counted_never_served_and_dropped",)),
    Mutant("blob-size-unchecked", "a blob file of another size than its row's served",
           "daemon/store_blobs.c", "if ((int64_t)st->st_size != len) {", "if (0) {",
           ("test_large.test_a_damaged_blob_file_is_a_miss_counted_never_served_and_dropped",)),
    # The artifact scope check (daemon/artifact.c).
    Mutant("scope-everyone", "scope check: every uid in one scope", "daemon/*.c",
           "return (int64_t)c->uid;", "return ARTIFACT_SCOPE_ALL;",
           ("test_artifact.test_a_second_uid_never_sees_the_first_uids_artifact",
            "test_artifact.test_redis_carries_artifacts_within_their_scope")),
    Mutant("scope-no-groups", "scope check: artifact-groups ignored", "daemon/*.c",
           "if ((i < 0 ? c->gid : c->groups[i]) == a->groups[g])", "if (0)",
           ("test_artifact.test_a_group_shares_one_scope",)),
    # Whose entries ls, show and explain describe (daemon/store_admin.c, manage.c).
    Mutant("view-everyone", "per-identity view: every entry shown to everyone", "daemon/*.c",
           '" AND (?8 IS NULL OR EXISTS (SELECT 1 FROM entry_users u"',
           '" AND (?8 IS NULL OR 1 OR EXISTS (SELECT 1 FROM entry_users u"',
           ("test_tenants.test_a_tenant_learns_nothing_of_anothers_entries",
            "test_manage.test_a_uid_sees_only_its_own_entries_on_the_main_socket")),
    Mutant("view-no-hits", "per-identity view: a hit not noted", "daemon/*.c",
           "store_note_user(s->store, k->hash, conn_tenant(c));", "(void)0;",
           ("test_manage.test_an_entry_a_uid_is_answered_with_is_its_own_too",)),
    # Group commit of artifact puts (daemon/store_batch.c).
    Mutant("put-batch-off", "group commit: each put its own commit", "daemon/*.c",
           "int together = n > 1 && store_batch_begin(b->store) == 0;", "int together = 0;",
           ("test_artifact.test_concurrent_puts_share_a_commit_and_each_is_durable_before_its_reply",
            "test_artifact.test_a_failing_put_in_a_batch_loses_and_acknowledges_no_other")),
    # The store and the request path (daemon/store_blobs.c, store_batch.c,
    # store_put.c, client/lib.c, python/ptxcache/client.py): blob files' modes
    # and O_NOFOLLOW, truncated control messages, a batch redone after
    # ENOSPC, the reply after the commit, entry_users kept to the rows
    # there are. (conn_send_fd()'s "nothing queued" has no mutant: a reply
    # is written at once where the socket takes it, so bytes wait only
    # while the socket is full, and then sendmsg() fails and the reply goes
    # inline anyway; no test here reaches the turn where both differ, and
    # broken, the check was noticed in one run of three.)
    Mutant("blob-file-mode", "blob files: created readable by all, not 0400", "daemon/*.c",
           "O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0400);",
           "O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);",
           ("test_large.test_a_large_value_is_a_file_and_comes_back_inline_and_as_its_descriptor",)),
    Mutant("blob-dir-mode", "blob files: their directory open to all, not 0700", "daemon/*.c",
           "if (mkdir(b->dir, 0700) < 0 && errno != EEXIST) {",
           "if (mkdir(b->dir, 0755) < 0 && errno != EEXIST) {",
           ("test_large.test_a_large_value_is_a_file_and_comes_back_inline_and_as_its_descriptor",)),
    Mutant("blob-subdir-mode", "blob files: their subdirectories open to all, not 0700",
           "daemon/*.c", "if (mkdirat(b->dfd, sub, 0700) == 0) {",
           "if (mkdirat(b->dfd, sub, 0755) == 0) {",
           ("test_large.test_a_large_value_is_a_file_and_comes_back_inline_and_as_its_descriptor",)),
    Mutant("blob-file-follows", "blob files: a symlink in a value's file's place followed",
           "daemon/*.c", "openat(b->dfd, name, O_RDONLY | O_NOFOLLOW | O_CLOEXEC | O_NOCTTY);",
           "openat(b->dfd, name, O_RDONLY | O_CLOEXEC | O_NOCTTY);",
           ("test_large.test_symlinks_planted_in_the_blob_directory_are_never_followed",)),
    Mutant("blob-sweep-follows", "blob files: the sweep follows a symlinked subdirectory",
           "daemon/*.c", "openat(b->dfd, n, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);",
           "openat(b->dfd, n, O_RDONLY | O_DIRECTORY | O_CLOEXEC);",
           ("test_large.test_symlinks_planted_in_the_blob_directory_are_never_followed",)),
    Mutant("py-ctrunc-unread", "Python client: a truncated control message with no data unlooked at",
           "python/ptxcache/*.py", "if anc or flags & _CTRUNC:", "if anc:",
           ("test_large.test_a_client_out_of_descriptors_gets_a_clear_error_and_the_daemon_serves_on",)),
    Mutant("py-ctrunc-ignored", "Python client: a truncated control message taken as no descriptor",
           "python/ptxcache/*.py",
           "if flags & _CTRUNC or len(got) > 1 or len(self._fds) + len(got) > FDS_MAX:",
           "if len(got) > 1 or len(self._fds) + len(got) > FDS_MAX:",
           ("test_large.test_a_client_out_of_descriptors_gets_a_clear_error_and_the_daemon_serves_on",)),
    # A large put's file synced off the loop (daemon/syncer.c, artifact.c,
    # store_blobs.c), its connection paused meanwhile (conn.c).
    Mutant("sync-on-loop", "a put's file synced on the loop, not by the syncer", "daemon/*.c",
           "if (syncer_sync(a->sync, spool_sync, spool_synced, p) < 0)", "if (1)",
           ("test_large.test_a_large_puts_sync_leaves_the_daemon_serving_everyone_else",)),
    # The WAL's checkpoints (daemon/store_ckpt.c): on a thread, and on
    # the loop only at the mark that keeps the WAL within the reserve.
    Mutant("ckpt-on-loop", "the WAL checkpointed on the loop, in the commit", "daemon/*.c",
           "if (pages < CKPT_LOOP_PAGES) {", "if (0) {",
           ("test_checkpoint.test_a_slow_checkpoint_holds_up_no_client",)),
    Mutant("ckpt-never-on-loop", "the WAL left to the thread's checkpoints alone", "daemon/*.c",
           "if (pages < CKPT_LOOP_PAGES) {", "if (1) {",
           ("test_checkpoint.test_a_stream_of_puts_keeps_the_wal_within_the_reserve",)),
    Mutant("ckpt-skip-while-thread", "the loop's checkpoint at the mark skipped while the thread's runs",
           "daemon/*.c", "ckpt_hold(c);", "if (pthread_mutex_trylock(&c->mu)) return SQLITE_OK;",
           ("test_checkpoint.test_the_wal_stays_within_the_reserve_however_slow_the_thread",)),
    Mutant("sync-twice", "a synced file synced again before its rename", "daemon/*.c",
           "((t->synced < t->written || t->written == 0) && fsync(t->fd) < 0)",
           "(fsync(t->fd) < 0)",
           ("test_large.test_a_large_puts_sync_leaves_the_daemon_serving_everyone_else",)),
    Mutant("sync-no-pause", "a connection read on while its put syncs", "daemon/*.c",
           "conn_pause(c);", "(void)c;",
           ("test_large.test_a_request_after_a_large_put_on_its_connection_sees_the_put_stored",)),
    Mutant("sync-stop-early", "a stop leaves while a put's file syncs, unanswered", "daemon/*.c",
           "if (ac.syncing)", "if (0)",
           ("test_large.test_a_stop_during_a_puts_sync_waits_for_it_and_answers_the_put",)),
    Mutant("read-no-turns", "a readable event reads until the socket is empty", "daemon/*.c",
           "#define READ_TURN (1024 * 1024)", "#define READ_TURN ((size_t)1 << 40)",
           ("test_large.test_a_client_whose_large_value_is_all_there_takes_turns_with_the_others",)),
    Mutant("unlink-on-loop", "a removed entry's file unlinked on the loop", "daemon/*.c",
           "struct retired *r = s->sync && !s->unlink_now ? malloc(sizeof *r) : NULL;",
           "struct retired *r = NULL;",
           ("test_large.test_a_replaced_values_file_is_unlinked_after_the_answer_off_the_loop",)),
    Mutant("same-put-rename-over", "the same value put again renamed over its old file",
           "daemon/*.c", "if (renameat2(dfd, t->name, dfd, name, RENAME_NOREPLACE) == 0)",
           "if (renameat(dfd, t->name, dfd, name) == 0)",
           ("test_large.test_the_same_value_put_again_takes_its_files_name_and_the_old_goes_off_the_loop",)),
    Mutant("unlink-later-when-full", "a full disk's evictions unlinked later, not at once",
           "daemon/*.c", "s->unlink_now = 1;      /* the retry needs the room now */",
           "s->unlink_now = 0;",
           ("test_disk_full.test_a_full_disk_gets_its_room_at_once_though_unlinks_are_slow",)),
    # The lease hand-off (daemon/artifact.c, l2_fleet.c, flight.c).
    Mutant("handoff-artifact", "lease hand-off: a node's lease ends, no waiter takes it",
           "daemon/*.c", "for (pp = &s->waiters; *pp && !(*pp)->want_lease; pp = &(*pp)->next)",
           "for (pp = &s->waiters; *pp; pp = &(*pp)->next)",
           ("test_artifact.test_a_producer_killed_hands_the_lease_on_at_once",
            "test_artifact.test_release_and_expiry_end_a_lease_early_or_at_its_bound")),
    Mutant("handoff-fleet", "lease hand-off: a fleet lease given up is left to lapse",
           "daemon/*.c", "if (w->holding && !published && *w->f->l2 == w->l2)", "if (0)",
           ("test_fleet.test_a_release_hands_the_fleet_lease_on_at_once",)),
    Mutant("handoff-flight", "lease hand-off: a flight that published nothing keeps its lease",
           "daemon/*.c", "fleet_end(f->fw, published);", "fleet_end(f->fw, 1);",
           ("test_fleet.test_a_failed_compile_hands_the_fleet_lease_on_at_once",)),
    Mutant("silence-put-short", "silence detection: a put ends at a get's bound, a pause of Redis loses it",
           "daemon/*.c", "if ((op == OP_SET || op == OP_SET_CHUNK) && ms < L2_PUT_SILENCE_MS)",
           "if (0)",
           ("test_l2_silence.test_a_put_outlasts_a_pause_of_redis_that_would_end_a_get",)),
    Mutant("silence-cap-early", "silence detection: the cap on a trickle a tenth of its length",
           "daemon/*.c", "int too_long = now - cmd->sent_us > max_ms * 1000;",
           "int too_long = now - cmd->sent_us > max_ms * 100;",
           ("test_l2_silence.test_l2_a_trickle_never_silent_for_the_timeout_still_ends",)),
    # Tenants (daemon/manage.c, artifact.c): root on a tenant's socket is
    # no administrator; a tenant's artifacts are its own, here and in Redis.
    Mutant("admin-any-tenant", "is_admin: root on a tenant's socket administers all",
           "daemon/*.c", "return c->tenant.id == 0 && (c->uid == 0 || c->uid == geteuid());",
           "return (c->uid == 0 || c->uid == geteuid());",
           ("test_tenants.test_same_uid_on_two_tenants_never_sees_changes_lists_or_evicts_the_other",)),
    Mutant("artifact-scope-no-tenant", "artifact scope: the tenant left out of the key",
           "daemon/*.c", 'snprintf(sc->tenant, sizeof sc->tenant, "%s", c->tenant.name);',
           "sc->tenant[0] = '\\0';",
           ("test_tenants.test_same_uid_on_two_tenants_never_sees_changes_lists_or_evicts_the_other",)),
    Mutant("artifact-redis-no-tenant", "artifact Redis key: the tenant left out",
           "daemon/*.c", "tenant_qualify(&c->tenant, sc->base, sc->name, sizeof sc->name);",
           'snprintf(sc->name, sizeof sc->name, "%s", sc->base);',
           ("test_tenants.test_redis_tier_keeps_tenants_apart_across_nodes",)),
    # verify's report per identity (daemon/manage.c); libptxcache's
    # descriptor it cannot take (client/lib.c); two scopes' same large
    # bytes two files (daemon/store_blobs.c); two listed groups two scopes
    # (daemon/artifact.c).
    Mutant("verify-everyone", "verify: every entry checked and reported to anyone", "daemon/*.c",
           "int problems = store_verify(c->srv->store, &view, &report);",
           "int problems = store_verify(c->srv->store, NULL, &report);",
           ("test_tenants.test_a_tenant_learns_nothing_of_anothers_entries",
            "test_manage.test_a_uid_sees_only_its_own_entries_on_the_main_socket")),
    Mutant("lib-ctrunc-ignored", "libptxcache: a descriptor it could not take not told",
           "client/lib.c", "if (bad || (mh.msg_flags & MSG_CTRUNC)) {", "if (bad) {",
           ("test_large.test_libptxcache_out_of_descriptors_gets_a_clear_error_then_the_value",)),
    Mutant("blob-name-no-key", "blob files: named by the value's checksum alone", "daemon/*.c",
           'snprintf(name, 90, "%s/%s-%016llx", sub, hex, (unsigned long long)(uint64_t)sum);',
           'memcpy(sub, "00", 3); snprintf(name, 90, "00/%064d-%016llx", 0, '
           '(unsigned long long)(uint64_t)sum);',
           ("test_tenants.test_a_large_value_by_descriptor_reaches_its_own_tenant_alone",
            "test_tenants.test_a_large_value_of_a_group_reaches_its_group_on_its_tenant_alone")),
    Mutant("scope-groups-merged", "scope check: every listed group one scope", "daemon/*.c",
           "return ARTIFACT_SCOPE_GROUP(a->groups[g]);", "return ARTIFACT_SCOPE_GROUP(a->groups[0]);",
           ("test_tenants.test_a_large_value_of_a_group_reaches_its_group_on_its_tenant_alone",)),
    # The worker's start (daemon/worker_spawn.c): the master's signal mask given
    # back before the exec; the parent check against the master's pid
    # (not 1: the master may be PID 1 itself, in a container).
    Mutant("worker-mask-kept-blocked", "worker start: the spawn's all-blocked mask kept",
           "daemon/*.c", "sigprocmask(SIG_SETMASK, mask, NULL);", "(void)mask;",
           ("test_sandbox.test_workers_start_with_the_masters_signal_mask",)),
    Mutant("worker-parent-is-not-1", "worker start: the parent check asks for a parent other than 1",
           "daemon/*.c", "if (getppid() != c->master)", "if (getppid() == 1)",
           ("test_sandbox.test_workers_start_under_a_master_that_is_pid_1",)),
    # Who may see an entry (schema.sql's triggers on entry_users, which
    # daemon/store.c's notes fill): an entry's users go with its row,
    # deleted or replaced.
    Mutant("users-kept-on-delete", "entry_users: a deleted entry's users kept", "schema.sql",
           "CREATE TRIGGER IF NOT EXISTS entry_users_deleted AFTER DELETE ON entries BEGIN",
           "CREATE TRIGGER IF NOT EXISTS entry_users_deleted AFTER DELETE ON entries WHEN 0 BEGIN",
           ("test_manage.test_an_entry_replaced_or_recreated_by_another_uid_leaves_the_first_view",)),
    Mutant("users-kept-on-replace", "entry_users: a replaced entry's users kept", "schema.sql",
           "AFTER UPDATE OF created ON entries BEGIN",
           "AFTER UPDATE OF created ON entries WHEN 0 BEGIN",
           ("test_manage.test_an_entry_replaced_or_recreated_by_another_uid_leaves_the_first_view",)),
    # A put answered by its commit's result (daemon/store_batch.c, store_put.c):
    # a batch whose COMMIT failed (a full disk) is redone put by put, and a
    # lone put's failed COMMIT is its failure (an error), never "stored".
    Mutant("batch-commit-unchecked", "group commit: a batch's failed COMMIT answered \"stored\"",
           "daemon/*.c", "if (store_batch_commit(b->store, &err) < 0) {",
           "if (store_batch_commit(b->store, &err) < 0 && 0) {",
           ("test_artifact.test_a_batch_whose_commit_fails_is_answered_by_what_was_committed",
            "test_artifact.test_puts_whose_commit_fails_are_refused_and_are_not_there")),
    Mutant("put-commit-unchecked", "store: a put's failed COMMIT taken as done", "daemon/*.c",
           "rc = tx_commit(s);", "rc = (tx_commit(s), SQLITE_DONE);",
           ("test_artifact.test_a_batch_whose_commit_fails_is_answered_by_what_was_committed",
            "test_artifact.test_puts_whose_commit_fails_are_refused_and_are_not_there")),
    # The lent hot slot (daemon/store_hot.c): never refilled nor evicted
    # while lent.
    Mutant("hot-keep-over-lent", "hot slot: a lent slot refilled", "daemon/*.c",
           "if (!h || !data->len || n > HOT_MAX_ENTRY || h->lent)",
           "if (!h || !data->len || n > HOT_MAX_ENTRY)",
           ("unit:store_lent_entry_stays_until_returned",)),
    Mutant("hot-evict-lent", "hot slot: a lent slot evicted for room", "daemon/*.c",
           "if (o->data.data && !o->lent)", "if (o->data.data)",
           ("unit:store_lent_entry_survives_eviction",)),
    # A full disk under small puts (daemon/put_batch.c, store_ckpt.c): a
    # batch whose commit met it redone put by put before any is answered;
    # the commits of a full disk's room-making, under the loop's own hold
    # of the checkpoint mutex, checkpoint without taking it again.
    Mutant("batch-not-redone", "group commit: a batch the full disk took back answered as it was",
           "daemon/*.c", "for (size_t i = 0; !together && i < n; i++) {",
           "for (size_t i = 0; 0 && !together && i < n; i++) {",
           ("test_disk_full.test_a_batch_that_meets_a_full_disk_is_redone_put_by_put_and_each_is_stored",)),
    Mutant("ckpt-hold-retaken", "checkpoint: a commit under the loop's hold takes the mutex again",
           "daemon/*.c", "int mine = !c->held;", "int mine = 1;",
           ("test_disk_full.test_a_full_disk_whose_wal_outgrew_its_reserve_still_answers_every_put",)),
    # The syncer out of descriptors (daemon/syncer.c): a run of failures
    # is said once.
    Mutant("syncer-pipe-failure-said-each-time", "syncer: every failed pipe2() warned",
           "daemon/*.c", "if (!s->pipe_failed++)", "if (s->pipe_failed++ >= 0)",
           ("unit:syncer_out_of_descriptors_warns_once_and_recovers",)),
    # sharing = confirm (daemon/confirm.c): another's unconfirmed entry is
    # no hit.
    Mutant("confirm-serves-unconfirmed", "sharing = confirm: unconfirmed entries served to all",
           "daemon/*.c", "if (e->producer < 0 || e->producer == uid)", "if (1)",
           ("test_tenants.test_sharing_confirm_keeps_one_tenants_compile_from_another_until_confirmed",)),
    # The redaction of a URL's password (daemon/l2_conf.c).
    Mutant("redaction-off", "l2_url_redacted: the URL shown as it is", "daemon/*.c",
           "if (!at) {", "if (1) {",
           ("unit:l2_url_redacted_vectors",
            "test_secrets.test_secrets_print_config_shows_the_password_as_stars")),
    # The sdist's contents (mk/wheel_backend.py): files the build does not
    # need left out, which only the member check can see.
    Mutant("sdist-drops-tests", "sdist: the tree's tests left out", "mk/*.py",
           "return [f for f in files if os.path.isfile(os.path.join(ROOT, f))]",
           "return [f for f in files if os.path.isfile(os.path.join(ROOT, f)) "
           "and not f.startswith(\"tests/\")]",
           ("test_wheel.test_wheel_sdist_holds_the_tree_and_builds_the_same_wheel",)),
    # The Python client's read-ahead (python/ptxcache/client.py): bytes of
    # the next reply read with this one's, and descriptors with them.
    Mutant("py-read-ahead-kept", "Python client: a frame's bytes taken stay buffered",
           "python/ptxcache/*.py", "del have[:n]", "have = have",
           ("test_large.test_python_gets_answered_together_each_take_their_own_value_and_descriptor",)),
    Mutant("py-read-ahead-lost", "Python client: bytes read ahead of a large body are dropped",
           "python/ptxcache/*.py", "view[:got] = have", "got = 0",
           ("test_large.test_python_gets_answered_together_each_take_their_own_value_and_descriptor",)),
    Mutant("py-autotune-rescaled", "Python: a kernel narrowed to its stored best is R-block scaled and timed again",
           "python/ptxcache/*.py", "cls._dynamic_scale_rblock = _wrap_scale(module, scale)", "pass",
           ("test_python.test_python_a_warm_process_tunes_nothing_and_a_changed_gpu_tunes_again",)),
    Mutant("py-triton-key-own-left", "Python: Triton's own triton_key() computes again in every process",
           "python/ptxcache/*.py", "triton_key.TRITON_MODULE: _install_triton_key,", "",
           ("test_python.test_python_triton_key_is_computed_once_per_installation",)),
    # Every JIT: bytecode, a job's prefetch, JAX's cache, JIT directories.
    Mutant("py-bytecode-header-unchecked", "Python: stored bytecode runs whatever source or interpreter it was made for",
           "python/ptxcache/*.py", "if view[:n] != head:", "if False:",
           ("test_bytecode.test_bytecode_never_runs_stale_foreign_or_garbled_entries",)),
    Mutant("py-bytecode-filename-kept", "Python: loaded bytecode names the producer's path, not this process's",
           "python/ptxcache/*.py", "_fix_co_filename(code, filename)", "pass",
           ("test_bytecode.test_bytecode_second_process_loads_without_compiling",)),
    Mutant("py-prefetch-table-unread", "Python: a get asks the daemon for what the prefetch already holds",
           "python/ptxcache/*.py", "if not self.table:", "if True:",
           ("test_prefetch.test_prefetch_second_process_asks_for_none_of_its_entries",)),
    Mutant("py-prefetch-workers-record", "Python: Inductor's compile workers fetch and rewrite the job's record",
           "python/ptxcache/*.py", "if sys.argv and os.path.normpath(sys.argv[0]).endswith(COMPILE_WORKER):", "if False:",
           ("test_prefetch.test_prefetch_compile_workers_neither_fetch_nor_write_the_jobs_record",)),
    Mutant("py-jax-lease-kept", "Python: a lease JAX will not fill holds the other processes to its timeout",
           "python/ptxcache/*.py", "st.release_thread(self.namespace)", "None",
           ("test_jax.test_jax_a_write_jax_skips_or_a_failed_compile_lets_the_waiters_go",)),
    Mutant("py-jax-quick-compiles-dropped", "Python: JAX's compiles under a second are not stored on the daemon",
           "python/ptxcache/*.py", "cfg.config.update(MIN_TIME, 0.0)", "pass",
           ("test_jax.test_jax_a_quick_compile_is_stored_unless_the_user_set_a_minimum",)),
    Mutant("py-jitdirs-any-gpu", "Python: a JIT directory's files served to another GPU's processes",
           "python/ptxcache/*.py", 'return "%s|%s|%d" % (self.name, self.identity, n)', 'return "%s|%d" % (self.name, n)',
           ("test_jitdirs.test_jitdirs_identity_that_differs_only_in_compute_capability_is_not_served",)),
    Mutant("py-jitdirs-index-published", "Python: a mutable index file (numba's .nbi) is published",
           "python/ptxcache/*.py", 'NEVER = ("*.nbi", ', 'NEVER = (',
           ("test_jitdirs.test_jitdirs_declared_directory_is_served_and_its_index_is_not",)),
    Mutant("py-status-prefetches", "Python: `ptxcache status` prefetches for its own command line",
           "python/ptxcache/__main__.py", 'os.environ[prefetch.ENV] = "0"', "pass",
           ("test_python.test_python_status_is_no_job_and_prefetches_nothing",)),
    Mutant("py-jit-parts-at-start", "Python: the switch imports every part in every process, JIT or not",
           "python/ptxcache/*.py", "if any(m in sys.modules for m in modules) or \\", "if True or \\",
           ("test_python.test_python_switch_costs_a_process_that_imports_no_jit_nothing",)),
    Mutant("py-jitdirs-import-not-held", "Python: a tool's import returns before its directory is filled",
           "python/ptxcache/*.py", "after=lambda _module: self._wait(name))", "after=None)",
           ("test_jitdirs.test_jitdirs_node_b_finds_node_a_files_before_it_compiles",)),
    # What a review found (lease hand-off, failing disks, descriptors run
    # out, hostile Redis replies, a hostile daemon's descriptors).
    Mutant("handoff-own-waits", "a lease handed on leaves its new holder's other gets waiting on it",
           "daemon/*.c", "if (o->conn == w->conn) {", "if (0) {",
           ("test_artifact.test_a_lease_handed_on_answers_the_new_holders_other_gets_of_the_key",)),
    Mutant("sync-error-forgotten", "a put's file whose sync failed is synced again and stored",
           "daemon/*.c", "return t->sync_err = errno;", "return errno;",
           ("test_large.test_a_put_whose_file_fails_to_sync_is_refused_and_leaves_nothing",)),
    Mutant("exchanged-file-unlinked", "a value's file exchanged in is unlinked when its directory's sync fails",
           "daemon/*.c", "if (!swapped)", "if (1)",
           ("test_large.test_the_same_value_put_again_keeps_its_file_when_its_directory_fails_to_sync",)),
    Mutant("accept-spins", "accept() out of descriptors retried at once, the loop spinning",
           "daemon/*.c", "evconnlistener_set_error_cb(s.listener, on_accept_error);", "",
           ("test_large.test_a_daemon_out_of_descriptors_pauses_accepting_and_keeps_its_entries",)),
    Mutant("emfile-is-damage", "a blob file that cannot be opened now is a damaged entry, deleted",
           "daemon/*.c", "rc = *fd == -2 ? -1 : 1;", "rc = 1;",
           ("test_large.test_a_daemon_out_of_descriptors_pauses_accepting_and_keeps_its_entries",)),
    Mutant("behind-read-first", "a value behind a file is read before max-output is checked",
           "daemon/*.c", "if (overflows(c, out->len + len))", "if (0)",
           ("test_large.test_inline_gets_behind_a_file_hold_one_copy_each_within_max_output",)),
    Mutant("probe-left-claimed", "l2: a probe that ended here before its first command stays claimed",
           "daemon/*.c", "probe_unsent(x->l2);", ";",
           ("test_l2_live.test_l2_a_probe_that_fails_here_leaves_the_next_request_to_probe",)),
    Mutant("bg-running-by-state", "confirmation: a stopped worker let go counts as running again by its state",
           "daemon/worker.c", "if (w->job)     /* not one whose job was completed while it was stopped */",
           "if (w->state == W_BUSY)",
           ("test_confirm.test_a_stopped_confirmation_cancelled_by_a_reload_is_counted_out",)),
    Mutant("l2-unasked-reply-taken", "tier: a reply no command waits for is handed to hiredis",
           "daemon/l2_ev.c", "if (!e->ac->replies.head)", "if (0)",
           ("test_l2.test_a_reply_no_command_asked_for_ends_its_connection_not_the_daemon",)),
    Mutant("l2-array-strings-unbounded", "tier: an array's strings not counted against the reply's bytes",
           "daemon/l2_ev.c", "return e->objs <= L2_REPLY_OBJS && e->bytes <= L2_REPLY_BYTES;",
           "return e->objs <= L2_REPLY_OBJS;",
           ("test_l2.test_a_redis_whose_replies_claim_billions_holds_neither_the_loop_nor_memory",)),
    Mutant("ptxas-no-fsize", "ptxas: the files it writes unbounded",
           "daemon/cubin.c", "struct rlimit fsize = { CUBIN_MAX, CUBIN_MAX }, core = { 0, 0 };",
           "struct rlimit fsize = { RLIM_INFINITY, RLIM_INFINITY }, core = { 0, 0 };",
           ("test_service.test_a_ptxas_that_writes_past_what_is_read_back_is_stopped",)),
    Mutant("conn-large-buffer-kept", "a frame read whole: its buffer kept while the next waits",
           "daemon/conn.c", "if (c->in.cap > IN_KEEP && (left == 0 || (c->in_off && left < IN_KEEP &&",
           "if (c->in.cap > IN_KEEP && (left == 0 || (0 && left < IN_KEEP &&",
           ("test_large.test_a_frame_read_whole_is_not_kept_while_the_next_one_waits_for_its_rest",)),
    Mutant("conn-moving-reply-idle", "a reply still moving to a slow reader counted as idle",
           "daemon/conn.c", "} else if (out < c->idle_out) {",
           "} else if (0) {",
           ("test_abuse.test_a_slow_reader_of_a_large_reply_is_not_idle_one_that_stops_is",)),
    Mutant("l2-abandoned-get-fetched", "tier: a get nobody waits for goes on fetching its chunks",
           "daemon/l2.c", "if (x->abandoned) {", "if (0) {",
           ("test_l2_silence.test_a_tier_get_nobody_waits_for_any_more_stops_fetching_its_chunks",)),
    Mutant("lib-put-over-max-value-sent", "libptxcache: a value over artifact-max-value is sent",
           "client/lib.c", "if (over_max_value(pc, len)) {", "if (0) {",
           ("test_large.test_libptxcache_does_not_send_a_value_over_artifact_max_value",)),
    Mutant("lib-max-value-not-asked-again", "libptxcache: a limit learned once is never asked again",
           "client/lib.c", "if (!asked && ask_max_value(pc) < 0)", "if (!asked && 0)",
           ("test_large.test_libptxcache_does_not_send_a_value_over_artifact_max_value",)),
    Mutant("blob-hash-settles-in-seconds", "blobs: a fresh file's hash is remembered only after a second",
           "daemon/store_blobs.c", "if (!st->st_ctim.tv_nsec || !st->st_mtim.tv_nsec)", "if (1)",
           ("test_large.test_a_value_put_a_moment_ago_is_hashed_by_its_gets_for_a_tick_not_a_second",)),
    Mutant("ptxas-no-pdeathsig", "cubin: ptxas is not killed with its worker", "daemon/*.c",
           "if (prctl(PR_SET_PDEATHSIG, SIGKILL) < 0 || getppid() != c->parent)",
           "if (getppid() != c->parent)",
           ("test_service.test_a_ptxas_whose_worker_is_killed_goes_with_it",)),
    Mutant("py-down-lease-kept", "Python: a lease given up while the store is down is kept open",
           "python/ptxcache/artifacts.py", "if held.live() and c.close_if_free():", "if False:",
           ("test_python.test_python_a_lease_given_up_while_the_store_is_down_ends_at_once",)),
    Mutant("py-put-over-limit-sent", "Python: a value over the daemon's artifact-max-value sent anyway",
           "python/ptxcache/*.py", "if self.max_value is not None and len(value) > self.max_value:",
           "if False:",
           ("test_python.test_python_a_value_over_every_limit_is_refused_here_and_the_store_stays_up",)),
    Mutant("redis-objects-unbounded", "a Redis reply's objects taken as its header says", "daemon/*.c",
           "return e->objs <= L2_REPLY_OBJS && e->bytes <= L2_REPLY_BYTES;",
           "return e->bytes <= L2_REPLY_BYTES;",
           ("test_l2.test_a_redis_whose_replies_claim_billions_holds_neither_the_loop_nor_memory",)),
    Mutant("redis-bytes-unbounded", "a Redis reply's bytes buffered as its header says", "daemon/*.c",
           "return r && r->buf && sdslen(r->buf) - r->pos > L2_REPLY_BYTES;", "return 0;",
           ("test_l2.test_a_redis_whose_replies_claim_billions_holds_neither_the_loop_nor_memory",)),
    Mutant("redirect-restarts-bound", "each redirection sends a command with a new 10 s bound",
           "daemon/*.c", "if (!cmd->sent_us)", "if (1)",
           ("test_l2.test_redirections_that_trickle_end_within_a_commands_bound",)),
    Mutant("nodes-never-freed", "cluster nodes no map names are never freed", "daemon/*.c",
           "if (!by || map_room(l2, m) < 0) {", "if (!by) {",
           ("test_l2.test_a_slot_map_of_1023_masters_once_does_not_keep_the_cluster_out",)),
    Mutant("refused-kept", "a refused connection that never reads its error is kept", "daemon/*.c",
           "struct timeval tv = { c->srv->cfg->header_timeout_s, 0 };",
           "struct timeval tv = { 1000000, 0 };",
           ("test_abuse.test_a_refused_client_that_never_reads_is_closed_after_header_timeout",)),
    Mutant("fatal-lingers", "a worker that answers a fatal error is trusted to exit", "daemon/*.c",
           "retire(w);      /* its exit made sure of */", "mark_dying(w);",
           ("test_sandbox.test_a_worker_that_claims_a_fatal_error_and_lingers_is_killed_and_not_read",)),
    Mutant("socket-inherited", "ptxas inherits the assembler worker's socket to the master",
           "daemon/*.c", "fcntl(wfd, F_SETFD, FD_CLOEXEC);", "(void)wfd;",
           ("test_sandbox.test_a_ptxas_child_that_keeps_the_workers_socket_holds_up_no_job",)),
    Mutant("py-fork-keeps-connection", "Python: a child keeps its parent's connection and lock",
           "python/ptxcache/*.py", "        c._forked()", "        pass",
           ("test_python.test_python_a_child_forked_mid_request_is_not_stuck_and_holds_no_lease",)),
    Mutant("py-release-waits", "Python: a release waits for the store's lock, a finalizer's too",
           "python/ptxcache/*.py", "if not self._lock.acquire(timeout=0.1):",
           "if not self._lock.acquire():",
           ("test_python.test_python_a_finalizers_release_inside_the_stores_lock_waits_for_nothing",)),
    Mutant("py-dead-lease-released", "Python: a lease of a connection gone is released on its successor",
           "python/ptxcache/*.py", "        if not held.live():\n", "        if False:\n",
           ("test_python.test_python_a_lease_of_a_connection_gone_is_never_released_on_its_successor",)),
    Mutant("py-progress-fd-kept", "Python client: a descriptor that came with a progress frame is kept",
           "python/ptxcache/*.py", "os.close(fd)    # a frame we do not wait for: its descriptor too",
           "pass",
           ("test_python.test_python_a_hostile_daemons_descriptors_are_closed_and_its_sizes_refused",)),
]


# What a test file runs beyond the daemon and its clients, by a name its
# source (or that of a test file it imports) holds.
CLIENTS = ["build/ptxcached", "build/ptxcache", "build/libptxcache.a", "build/libptxcache.so"]
PROGRAMS = {"l2drive": "build/l2drive", "relocdrive": "build/relocdrive",
            "PROBE_DAEMON": "build/ptxcached-probe", "replay_": "all"}


def programs_of(module: str, seen: Optional[set] = None) -> List[str]:
    """The programs tests/MODULE.py runs, with those of the test files it
    imports."""
    seen = set() if seen is None else seen
    seen.add(module)
    with open(os.path.join(ROOT, "tests", module + ".py"), encoding="utf-8") as f:
        src = f.read()
    out = [target for name, target in PROGRAMS.items() if name in src]
    for other in re.findall(r"^(?:from|import) (test_\w+)", src, re.M):
        if other not in seen:
            out += programs_of(other, seen)
    return out


def targets(m: Mutant) -> List[str]:
    """What make builds for m: what its named tests run, if it changes
    what the build compiles (C, or schema.sql, which the daemon embeds)."""
    if not m.files.endswith((".c", ".cpp", ".h", ".sql")):
        return []       # Python, the backend: the tests run the sources themselves
    out: List[str] = []
    for t in m.tests:
        need = ["build/unit"] if t.startswith("unit:") else CLIENTS + programs_of(t.split(".")[0])
        for x in need:
            if x not in out:
                out.append(x)
    return ["all"] if "all" in out else out


def sh(cmd: List[str], cwd: str, log, timeout: Optional[float] = None, env=None) -> int:
    log.write("$ %s\n" % " ".join(cmd))
    log.flush()
    try:
        return subprocess.run(cmd, cwd=cwd, stdout=log, stderr=subprocess.STDOUT,
                              timeout=timeout, env=env).returncode
    except subprocess.TimeoutExpired:
        log.write("(timed out after %s s)\n" % timeout)
        return 124


def tree_files() -> List[str]:
    r = subprocess.run(["git", "-C", ROOT, "ls-files", "-z", "-co", "--exclude-standard"],
                       capture_output=True, check=True)
    return [f for f in r.stdout.decode().split("\0") if f and os.path.isfile(os.path.join(ROOT, f))]


def make_copy(build: str, tree: str):
    """The working tree's files and BUILD, timestamps kept (make then
    rebuilds nothing), into tree; what is there already is replaced."""
    shutil.rmtree(tree, ignore_errors=True)
    os.makedirs(tree)
    files = tree_files()
    for f in files:
        dst = os.path.join(tree, f)
        os.makedirs(os.path.dirname(dst), exist_ok=True)
        shutil.copy2(os.path.join(ROOT, f), dst)
    # The copy is no git checkout: its list of files, for the tests and
    # the sdist backend that need one, as an sdist (and make deb's copy)
    # carries it.
    with open(os.path.join(tree, "MANIFEST"), "w", encoding="utf-8") as f:
        f.writelines(x + "\n" for x in sorted(files) if x != "MANIFEST")
    shutil.copytree(build, os.path.join(tree, "build"), symlinks=True,
                    ignore=shutil.ignore_patterns("mutants", "wheel-test", "deb", "bench", "roots"))


def locate(tree: str, m: Mutant) -> Tuple[str, int]:
    """The one (file, line index) whose line holds m.find, or ValueError."""
    hits = []
    for path in sorted(glob.glob(os.path.join(tree, m.files))):
        with open(path, encoding="utf-8") as f:
            for i, line in enumerate(f):
                if m.find in line:
                    hits.append((path, i))
    if len(hits) != 1:
        raise ValueError("%r: %d lines of %s hold it (%s)" % (
            m.find, len(hits), m.files, ", ".join("%s:%d" % (os.path.relpath(p, tree), i + 1)
                                                 for p, i in hits)))
    path, i = hits[0]
    with open(path, encoding="utf-8") as f:
        if f.readlines()[i].count(m.find) != 1:
            raise ValueError("%r twice in one line" % m.find)
    return hits[0]


class Outcome(NamedTuple):
    result: str         # "passed", "failed", "skipped", or "error" (the name is no test)
    why: str            # for "failed": how (FAIL, crashed, hung); for "error": what
    took: float


def run_test(tree: str, t: str, log, timeout: float) -> Outcome:
    """The named test alone in the copy: its own result line, read off the
    runner's output (a name must be one whole test's)."""
    t0 = time.time()
    unit = t.startswith("unit:")
    name = t[len("unit:"):] if unit else t
    # A test file's tests in run.py's own process (--module): a hung one
    # is killed with it, and leaves nothing running.
    cmd = [os.path.join(tree, "build", "unit"), name] if unit else \
        [sys.executable, "tests/run.py", "--module", name.split(".")[0], "-k", name]
    env = dict(os.environ, PTXCACHE_BUILD="build", PYTHONDONTWRITEBYTECODE="1")
    log.write("$ %s\n" % " ".join(cmd))
    log.flush()
    try:
        r = subprocess.run(cmd, cwd=tree, env=env, capture_output=True, text=True,
                           errors="replace", timeout=timeout)
        out, rc = r.stdout + r.stderr, r.returncode
    except subprocess.TimeoutExpired as e:
        def text(x):
            return x.decode(errors="replace") if isinstance(x, bytes) else (x or "")
        log.write(text(e.stdout) + text(e.stderr) + "\n(hung: killed after %.0f s)\n" % timeout)
        return Outcome("failed", "hung past %.0f s" % timeout, time.time() - t0)
    log.write(out)
    took = time.time() - t0
    # Every result line of this run: "ok   NAME", "FAIL NAME ...", "skip NAME ...".
    lines = re.findall(r"^(ok  |FAIL|skip) (\S+)", out, re.M)
    ran = [n for _, n in lines]
    if unit:
        if rc < 0 and not ran:
            # Killed by a signal before its line: the filter matched this
            # test alone (checked in the baseline), so it crashed.
            return Outcome("failed", "crashed (signal %d)" % -rc, took)
        if ran != [name]:
            return Outcome("error", "%s: build/unit %s ran %s, not that one test" % (t, name, ran), took)
    elif name not in ran:
        return Outcome("error", "%s: tests/run.py -k %s ran no test of that name (ran %s)"
                       % (t, name, ran), took)
    verdict = dict((n, v) for v, n in lines)[name]
    if verdict == "FAIL":
        return Outcome("failed", "FAIL", took)
    if verdict == "skip":
        return Outcome("skipped", "skipped", took)
    return Outcome("passed", "", took)


def run_one(tree: str, m: Mutant, log, jobs: str, took: Dict[str, float]) -> Tuple[str, str]:
    """("killed", the test and how), ("survived", ""), or ("error", why).
    took: each named test's baseline time."""
    try:
        path, idx = locate(tree, m)
    except ValueError as e:
        return "error", str(e)
    with open(path, encoding="utf-8") as f:
        lines = f.readlines()
    original = list(lines)
    lines[idx] = lines[idx].replace(m.find, m.replace)
    log.write("mutant %s: %s:%d\n- %s+ %s" % (m.name, os.path.relpath(path, tree), idx + 1,
                                              original[idx], lines[idx]))
    try:
        with open(path, "w", encoding="utf-8") as f:
            f.writelines(lines)
        build = targets(m)
        if build and sh(["make", "-j" + jobs] + build, tree, log) != 0:
            return "error", "the mutant does not build (an error of the list; see its log)"
        skipped = []
        for t in sorted(m.tests, key=lambda t: took[t]):
            o = run_test(tree, t, log, max(60.0, 5 * took[t]))
            if o.result == "failed":
                return "killed", "%s (%s)" % (t, o.why)
            if o.result == "error":
                return "error", o.why
            if o.result == "skipped":
                skipped.append(t)
    finally:
        # Back as it was, newer than the mutant's objects: the next build
        # rebuilds this file again.
        with open(path, "w", encoding="utf-8") as f:
            f.writelines(original)
    return "survived", ("skipped: " + ", ".join(skipped)) if skipped else ""


def passed_times(path: str) -> Dict[str, float]:
    """{test: seconds} from tests/run.py's times file (NAME<TAB>SECONDS)."""
    out = {}
    with open(path, encoding="utf-8") as f:
        for line in f:
            name, _, secs = line.rstrip("\n").partition("\t")
            out[name] = float(secs)
    return out


T = TypeVar("T")
R = TypeVar("R")


def over_trees(trees: Sequence[str], items: Sequence[T], fn: Callable[[str, T], R]) -> List[R]:
    """fn(tree, item) for each item, each tree working on one item at a
    time; the results in the items' order."""
    free: "queue.Queue[str]" = queue.Queue()
    for t in trees:
        free.put(t)

    def in_a_free_tree(item: T) -> R:
        tree = free.get()
        try:
            return fn(tree, item)
        finally:
            free.put(tree)
    with ThreadPoolExecutor(len(trees)) as pool:
        return list(pool.map(in_a_free_tree, items))


def say(line: str):
    sys.stdout.write(line + "\n")      # one write: the workers' lines stay whole
    sys.stdout.flush()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--only", default="")
    ap.add_argument("--workers", type=int, default=2)
    ap.add_argument("--passed")
    ap.add_argument("--list", action="store_true")
    a = ap.parse_args()
    only = [x for x in a.only.split(",") if x]
    unknown = [x for x in only if x not in {m.name for m in MUTANTS}]
    chosen = [m for m in MUTANTS if not only or m.name in only]
    if a.list or unknown:
        for m in MUTANTS:
            print("%-28s %s: %s" % (m.name, m.mechanism, ", ".join(m.tests)))
        if unknown:
            print("mutants: no mutant %s" % ", ".join(unknown), file=sys.stderr)
        return 2 if unknown else 0
    build = os.path.abspath(a.build)
    if not os.path.exists(os.path.join(build, "ptxcached")):
        print("mutants: %s holds no build (make all corpus first)" % build, file=sys.stderr)
        return 2
    started = time.time()
    work = os.path.join(build, "mutants")
    os.makedirs(work, exist_ok=True)
    trees = [os.path.join(work, "tree%d" % (i + 1)) for i in range(max(1, a.workers))]
    for tree in trees:
        make_copy(build, tree)
    jobs = os.environ.get("MUTANT_JOBS", "2")

    # 1. The list: each pattern one line.
    stale = []
    for m in chosen:
        try:
            locate(trees[0], m)
        except ValueError as e:
            stale.append("%s: %s" % (m.name, e))
    # 2. The baseline: each unchanged copy builds, and each named test,
    # alone, passes there (or passed in the suite run of --passed).
    logs = {tree: open(os.path.join(work, "baseline-%s.log" % os.path.basename(tree)), "w")
            for tree in trees}
    with ThreadPoolExecutor(len(trees)) as pool:
        built = list(pool.map(lambda tree: sh(["make", "-j" + jobs, "all"], tree, logs[tree]), trees))
    if any(built):
        print("mutants: an unchanged copy does not build (%s)" % ", ".join(
            logs[t].name for t, rc in zip(trees, built) if rc), file=sys.stderr)
        return 1
    times = passed_times(a.passed) if a.passed else {}
    tests = []
    for m in chosen:
        tests += [t for t in m.tests if t not in tests and t not in times]
    if a.passed:
        say("baseline: %d named tests passed in %s, %d to run" % (
            len({t for m in chosen for t in m.tests} - set(tests)), a.passed, len(tests)))

    def baseline(tree: str, t: str) -> Outcome:
        o = run_test(tree, t, logs[tree], 1800)
        say("baseline  %-9s %s (%.0f s)%s" % (o.result, t, o.took,
                                             ": " + o.why if o.result == "error" else ""))
        return o
    for t, o in zip(tests, over_trees(trees, tests, baseline)):
        times[t] = o.took
        if o.result != "passed":
            stale.append("baseline: %s %s%s" % (t, o.result, ": " + o.why if o.why else ""))
    for log in logs.values():
        log.close()
    if stale:
        print("\nmutants: the list or the unchanged tree is wrong; no mutant run (%s):" %
              ", ".join(log.name for log in logs.values()))
        for x in stale:
            print("  " + x)
        return 1
    baseline_s = time.time() - started

    # 3. The mutants.
    def mutate(tree: str, m: Mutant) -> Tuple[str, str]:
        t0 = time.time()
        with open(os.path.join(work, m.name + ".log"), "w") as log:
            verdict, detail = run_one(tree, m, log, jobs, times)
        say("%-9s %-28s %s%s (%.0f s)" % (verdict, m.name, m.mechanism,
                                          ": " + detail if detail else "", time.time() - t0))
        return verdict, detail
    results = over_trees(trees, chosen, mutate)
    print()
    print("| mutant | mechanism | result | killed by |")
    print("|---|---|---|---|")
    for m, (verdict, detail) in zip(chosen, results):
        print("| %s | %s | %s | %s |" % (m.name, m.mechanism, verdict, detail))
    bad = [m.name for m, (v, _) in zip(chosen, results) if v != "killed"]
    print("\n%d mutants, %d killed, %d not: %s; %d workers; baseline %.0f s, all %.0f s (logs in %s)" % (
        len(results), len(results) - len(bad), len(bad), ", ".join(bad) or "none", len(trees),
        baseline_s, time.time() - started, work))
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
