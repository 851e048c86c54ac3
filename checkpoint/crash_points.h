// Crash points: named places in the checkpoint writers (after each file is
// written, fsynced, renamed; before and after the directory rename) where a
// fault-injection test can make the process die as a crash would (_exit,
// no cleanup, no destructors). A test process arms them with
// ArmCrashPoints(n): the n-th point reached, counting from 1, exits with
// code kCrashExitCode. Unarmed (always, outside such tests) a point costs
// one atomic load.
//
// For tests of whole processes, TRAINYARD_FAULT_HOLD_AT="<name>#<n>" (or
// just "<name>", meaning #1) in a process's environment makes the thread
// that reaches a point whose name contains <name> for the n-th time print
// "fault hold: <name>" on stderr and block forever, so that the test can
// SIGKILL the process at exactly that moment (a kill during an async save).
//
// A process crash keeps what the kernel already has; it tests the writers'
// protocol (nothing half-written is ever taken for a checkpoint), not the
// disk's behaviour on power loss, which fsync ordering covers.
#ifndef TRAINYARD_CHECKPOINT_CRASH_POINTS_H_
#define TRAINYARD_CHECKPOINT_CRASH_POINTS_H_

namespace trainyard {

constexpr int kCrashExitCode = 77;

void CrashPoint(const char* name);
// 0 disarms; points are counted from the call.
void ArmCrashPoints(int n);
// Points passed since the last ArmCrashPoints (to size a test's loop).
int CrashPointsPassed();

}  // namespace trainyard

#endif  // TRAINYARD_CHECKPOINT_CRASH_POINTS_H_
