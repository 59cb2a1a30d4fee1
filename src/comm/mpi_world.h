// The `mpi` backend (built when Open MPI is found; MOTLEY_HAVE_MPI): one rank per process,
// launched by mpiexec, host memory only (device tensors are staged by HierarchicalCommunicator).
// The ring engine runs over MPI_Isend / MPI_Irecv; every wait POLLS (MPI_Test with back-off sleeps
// from 10 us to 1 ms), never a spinning blocking call, so waiting ranks leave the cores to working
// ones (run with `--mca mpi_yield_when_idle 1` as well).
//
// Liveness: with MPI_THREAD_MULTIPLE a background thread sends a heartbeat to every peer each
// heartbeat_interval_s and drains the control channel (heartbeats, aborts, losses); a peer silent
// for silence_timeout_s fails a wait at once ("silent"), one that beats but does not send fails at
// the deadline ("alive but slow"). The rank that finds a peer silent declares it lost to every
// other rank over the control channel: from then on every operation of the communicators opened
// before fails there too (kUnavailable, naming the lost rank), and Communicator::Survivors opens
// a context over the others on a communicator duplicated at start-up for the purpose (no MPI
// collective, so no survivor waits on the lost rank). Abort sends the reason to every rank over
// the control channel. After a loss end the job with AbortJob: MPI_Finalize waits for every
// process, the lost one too, forever.
// Known limit: after a failed wait, MPI may still read a withdrawn send buffer; abort the world.
//
// Ownership: Connect returns the world communicator; destroy every communicator before Finalize.
// Thread safety: as communicator.h; Connect and Finalize from the main thread.
#pragma once

#include <memory>

#include "comm/communicator.h"
#include "comm/link_model.h"

namespace motley::comm {

class MpiWorld {
 public:
  // Initialises MPI (MPI_Init_thread, asking for MPI_THREAD_MULTIPLE) if needed and returns this
  // process's world communicator.
  static Result<std::unique_ptr<Communicator>> Connect(int* argc, char*** argv,
                                                       CommOptions options = {},
                                                       Emulation emulation = {});
  static void Finalize();
  // Ends every process of the job (MPI_Abort on MPI_COMM_WORLD; mpiexec exits with exit_code).
  [[noreturn]] static void AbortJob(int exit_code);
};

}  // namespace motley::comm
