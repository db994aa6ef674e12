// Background progress. The simulator only moves when the program calls a verb (a poll, a wait);
// a program that waits outside the library, in poll()/epoll_wait()/read() on a completion
// channel's or the context's async fd, would wait forever. So once the program has made no call
// for 2 ms (wall clock), a background thread runs the world's pending events, virtual time
// going 1000 times as fast as the wall clock while every other thread sleeps in the kernel, as
// fast as the wall clock while one runs (it computes, or spins outside the library), until the
// program calls in again. A program that
// drives the simulator itself (polls CQs, waits in ibv_get_cq_event) never hands it over, and
// stays deterministic. On a fabric shared with other processes (VERBSIM_FABRIC) it looks after
// 100 us without a call, every 50 us: a peer may wait for this process's device to answer.
// VERBSIM_DROPIN_PROGRESS=0 turns the thread off.
#pragma once

namespace verbsim::dropin {

// Every entry point: the program is active.
void note_call() noexcept;
// Starts the thread (once per process; again in a forked child).
void start_progress() noexcept;
void progress_after_fork() noexcept;
// Whether the thread exists.
bool progress_running() noexcept;
// Whether a thread of the process other than the caller and the progress thread computes: it
// runs (state R in /proc/self/task/TID/stat) and has not called the library for 2 ms. False
// without /proc.
bool another_thread_computing() noexcept;

}  // namespace verbsim::dropin
