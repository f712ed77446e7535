// hal/collective.h, communicators: unique ids, init, destroy, abort, queries.
#include "api_common.hpp"
#include "collective_dispatch.hpp"
#include "layers/intercept.hpp"

#include "hal_util/env.hpp"

#include <cstring>
#include <random>

using namespace hal::loader;
using hal::collective::Deadline;
using hal::collective::Status;
using hal::collective::StoreAddress;

namespace {

// The layout of hal_comm_unique_id_t's bytes: a magic, the store's port and
// host, and a random session so two communicators on one store never meet.
struct UniqueIdLayout {
  char magic[8];
  uint16_t port;
  uint16_t reserved[3];
  uint64_t session;
  char host[64];
};
static_assert(sizeof(UniqueIdLayout) <= HAL_COMM_UNIQUE_ID_BYTES);
constexpr char kIdMagic[8] = "HALCID1";

// Servers that hal_comm_get_unique_id started; they live as long as the process.
std::mutex g_servers_mutex;
std::vector<std::unique_ptr<hal::collective::StoreServer>>& id_servers() {
  static auto* servers = new std::vector<std::unique_ptr<hal::collective::StoreServer>>();
  return *servers;
}

struct ResolvedConfig {
  uint32_t timeout_ms = HAL_COMM_DEFAULT_TIMEOUT_MS;
  hal_comm_bootstrap_t bootstrap = HAL_COMM_BOOTSTRAP_UNIQUE_ID;
  const char* store_address = nullptr;
};

hal_result_t resolve_config(const hal_comm_config_t* config, const char* function,
                            ResolvedConfig& out) {
  if (config == nullptr) return HAL_SUCCESS;
  hal_result_t result = HAL_SUCCESS;
  if (struct_too_small(config, function, "config", "hal_comm_config_t", result)) return result;
  if (config->timeout_ms != 0) out.timeout_ms = config->timeout_ms;
  out.bootstrap = config->bootstrap;
  out.store_address = config->store_address;
  if (static_cast<uint32_t>(out.bootstrap) > HAL_COMM_BOOTSTRAP_MPI) {
    return fail(HAL_ERROR_INVALID_ARGUMENT, function, "config->bootstrap %d is unknown",
                static_cast<int>(out.bootstrap));
  }
  return HAL_SUCCESS;
}

hal_comm_config_t plugin_config(const ResolvedConfig& resolved) {
  hal_comm_config_t config = HAL_COMM_CONFIG_INIT;
  config.timeout_ms = resolved.timeout_ms;
  config.bootstrap = resolved.bootstrap;
  config.store_address = resolved.store_address;
  return config;
}

hal_result_t fail_status(const Status& status, const char* function) {
  return fail(status.result, function, "%s", status.message.c_str());
}

}  // namespace

static hal_result_t comm_get_unique_id_body(hal_comm_unique_id_t* out_id) {
  constexpr const char* kFunction = "hal_comm_get_unique_id";
  return guarded(kFunction, [&]() -> hal_result_t {
    if (hal_result_t r = check_preconditions(kFunction, Required{out_id, "out_id"});
        r != HAL_SUCCESS) {
      return r;
    }
    const char* host = hal::util::env("HAL_COMM_STORE_HOST");
    StoreAddress address{host != nullptr && *host != '\0' ? host : "127.0.0.1", 0};
    Status status;
    auto server = hal::collective::StoreServer::start(address, status);
    if (!server) return fail_status(status, kFunction);
    UniqueIdLayout layout{};
    std::memcpy(layout.magic, kIdMagic, sizeof(kIdMagic));
    layout.port = server->port();
    layout.session = std::random_device{}() ^ (uint64_t{std::random_device{}()} << 32);
    std::snprintf(layout.host, sizeof(layout.host), "%s", address.host.c_str());
    {
      std::lock_guard lock(g_servers_mutex);
      id_servers().push_back(std::move(server));
    }
    hal_comm_unique_id_t id{};
    std::memcpy(id.bytes, &layout, sizeof(layout));
    *out_id = id;
    return HAL_SUCCESS;
  });
}

static hal_result_t comm_init_all_body(uint32_t count, const hal_device_t* devices,
                                       const hal_comm_config_t* config, hal_comm_t* out_comms) {
  constexpr const char* kFunction = "hal_comm_init_all";
  return guarded(kFunction, [&]() -> hal_result_t {
    if (hal_result_t r = check_preconditions(kFunction, Required{devices, "devices"},
                                             Required{out_comms, "out_comms"});
        r != HAL_SUCCESS) {
      return r;
    }
    if (count == 0) return fail(HAL_ERROR_INVALID_ARGUMENT, kFunction, "count is 0");
    ResolvedConfig resolved;
    if (hal_result_t r = resolve_config(config, kFunction, resolved); r != HAL_SUCCESS) return r;
    std::vector<hal_impl_device_t*> impls(count);
    for (uint32_t i = 0; i < count; ++i) {
      if (!is_live(devices[i], HandleKind::kDevice)) {
        return reject_handle(devices[i], HandleKind::kDevice, kFunction, "devices[i]");
      }
      if (devices[i]->plugin != devices[0]->plugin) {
        return fail(HAL_ERROR_DEVICE_MISMATCH, kFunction,
                    "devices[%u] is of plugin '%s', devices[0] of plugin '%s'", i,
                    devices[i]->plugin->name.c_str(), devices[0]->plugin->name.c_str());
      }
      for (uint32_t j = 0; j < i; ++j) {
        if (devices[j] == devices[i]) {
          return fail(HAL_ERROR_INVALID_ARGUMENT, kFunction, "devices[%u] repeats devices[%u]", i,
                      j);
        }
      }
      impls[i] = devices[i]->impl;
    }
    std::vector<std::unique_ptr<hal_comm_s>> comms;
    for (uint32_t i = 0; i < count; ++i) {
      comms.push_back(std::make_unique<hal_comm_s>(devices[i], i, count, resolved.timeout_ms));
    }
    const PluginRecord& plugin = *devices[0]->plugin;
    if (plugin.table.comm_init_local != nullptr) {
      const hal_comm_config_t plugin_view = plugin_config(resolved);
      std::vector<hal_impl_comm_t*> made(count, nullptr);
      const hal_result_t r =
          plugin.table.comm_init_local(count, impls.data(), &plugin_view, made.data());
      if (r != HAL_SUCCESS) return fail_from_plugin(r, kFunction, plugin.name);
      for (uint32_t i = 0; i < count; ++i) comms[i]->impl = made[i];
    } else {
      auto group = std::make_shared<hal::collective::LocalGroup>(count);
      for (uint32_t i = 0; i < count; ++i) comms[i]->host = make_local_host_comm(group, i);
    }
    for (uint32_t i = 0; i < count; ++i) out_comms[i] = comms[i].release();
    return HAL_SUCCESS;
  });
}

static hal_result_t comm_init_rank_body(hal_device_t device, uint32_t nranks,
                                        const hal_comm_unique_id_t* id, uint32_t rank,
                                        const hal_comm_config_t* config, hal_comm_t* out_comm) {
  constexpr const char* kFunction = "hal_comm_init_rank";
  return guarded(kFunction, [&]() -> hal_result_t {
    if (hal_result_t r =
            check_preconditions(kFunction, Live{device, "device"}, Required{out_comm, "out_comm"});
        r != HAL_SUCCESS) {
      return r;
    }
    ResolvedConfig resolved;
    if (hal_result_t r = resolve_config(config, kFunction, resolved); r != HAL_SUCCESS) return r;
    if (nranks == 0 || rank >= nranks) {
      return fail(HAL_ERROR_INVALID_ARGUMENT, kFunction, "rank %u is not below nranks %u", rank,
                  nranks);
    }
    StoreAddress address;
    std::string session;
    if (resolved.bootstrap == HAL_COMM_BOOTSTRAP_UNIQUE_ID) {
      if (id == nullptr) return null_argument(kFunction, "id");
      UniqueIdLayout layout;
      std::memcpy(&layout, id->bytes, sizeof(layout));
      layout.host[sizeof(layout.host) - 1] = '\0';
      if (std::memcmp(layout.magic, kIdMagic, sizeof(kIdMagic)) != 0) {
        return fail(HAL_ERROR_INVALID_ARGUMENT, kFunction,
                    "id was not made by hal_comm_get_unique_id");
      }
      address = {layout.host, layout.port};
      session = "id:" + std::to_string(layout.session);
    } else if (resolved.bootstrap == HAL_COMM_BOOTSTRAP_TCP_STORE) {
      if (resolved.store_address == nullptr ||
          !StoreAddress::parse(resolved.store_address, address)) {
        return fail(HAL_ERROR_INVALID_ARGUMENT, kFunction,
                    "config->store_address '%s' is not host:port",
                    resolved.store_address ? resolved.store_address : "(null)");
      }
      session = "store";
    }
    auto comm = std::make_unique<hal_comm_s>(device, rank, nranks, resolved.timeout_ms);
    const PluginRecord& plugin = *device->plugin;
    if (plugin.table.comm_init_rank != nullptr) {
      const hal_comm_config_t plugin_view = plugin_config(resolved);
      hal_impl_comm_t* made = nullptr;
      const hal_result_t r =
          plugin.table.comm_init_rank(device->impl, nranks, rank, &plugin_view, &made);
      if (r == HAL_SUCCESS) {
        comm->impl = made;
        *out_comm = comm.release();
        return HAL_SUCCESS;
      }
      if (r != HAL_ERROR_UNSUPPORTED) return fail_from_plugin(r, kFunction, plugin.name);
      take_plugin_message();  // the loader's own path answers instead
    }
    if (resolved.bootstrap == HAL_COMM_BOOTSTRAP_MPI) {
      return fail(HAL_ERROR_UNSUPPORTED, kFunction,
                  "plugin '%s' has no MPI support and the loader's host-staged collectives run "
                  "over a TCP store only",
                  plugin.name.c_str());
    }
    const bool serve = resolved.bootstrap == HAL_COMM_BOOTSTRAP_TCP_STORE && rank == 0;
    Status status;
    comm->host = make_store_host_comm(address, serve, session, rank, nranks,
                                      Deadline::after_ms(resolved.timeout_ms, nullptr), status);
    if (!comm->host) return fail_status(status, kFunction);
    *out_comm = comm.release();
    return HAL_SUCCESS;
  });
}

namespace {

hal_result_t release_comm(hal_comm_t comm, bool abort, const char* function) {
  // NULL is a no-op for hal_comm_destroy only.
  if (hal_result_t r = abort ? check_preconditions(function, Live{comm, "comm"})
                             : check_preconditions(function, Nullable{comm, "comm"});
      r != HAL_SUCCESS) {
    return r;
  }
  if (comm == nullptr) return HAL_SUCCESS;
  std::unique_ptr<hal_comm_s> owned(comm);
  const PluginRecord& plugin = *comm->device->plugin;
  if (comm->impl != nullptr) {
    if (abort) plugin.table.comm_abort(comm->impl);
    plugin.table.comm_destroy(comm->impl);
  } else if (abort) {
    comm->host->aborted.store(true);
    comm->host->leave_abruptly();
  }
  // The quarantine keeps the handle's memory, not its rank: a store rank says
  // goodbye now (calls in flight hold their own reference).
  comm->host.reset();
  comm->impl = nullptr;
  retire_comm(std::move(owned));
  return HAL_SUCCESS;
}

}  // namespace

static hal_result_t comm_destroy_body(hal_comm_t comm) {
  constexpr const char* kFunction = "hal_comm_destroy";
  return guarded(kFunction, [&] { return release_comm(comm, false, kFunction); });
}

static hal_result_t comm_abort_body(hal_comm_t comm) {
  constexpr const char* kFunction = "hal_comm_abort";
  return guarded(kFunction, [&] { return release_comm(comm, true, kFunction); });
}

static hal_result_t comm_get_async_error_body(hal_comm_t comm, hal_result_t* out_error) {
  constexpr const char* kFunction = "hal_comm_get_async_error";
  return guarded(kFunction, [&]() -> hal_result_t {
    if (hal_result_t r =
            check_preconditions(kFunction, Live{comm, "comm"}, Required{out_error, "out_error"});
        r != HAL_SUCCESS) {
      return r;
    }
    *out_error = comm_async_error(comm);
    return HAL_SUCCESS;
  });
}

static hal_result_t comm_count_body(hal_comm_t comm, uint32_t* out_count) {
  if (hal_result_t r = check_preconditions("hal_comm_count", Live{comm, "comm"},
                                           Required{out_count, "out_count"});
      r != HAL_SUCCESS) {
    return r;
  }
  *out_count = comm->ranks;
  return HAL_SUCCESS;
}

static hal_result_t comm_rank_body(hal_comm_t comm, uint32_t* out_rank) {
  if (hal_result_t r =
          check_preconditions("hal_comm_rank", Live{comm, "comm"}, Required{out_rank, "out_rank"});
      r != HAL_SUCCESS) {
    return r;
  }
  *out_rank = comm->rank;
  return HAL_SUCCESS;
}

static hal_result_t comm_get_device_body(hal_comm_t comm, hal_device_t* out_device) {
  if (hal_result_t r = check_preconditions("hal_comm_get_device", Live{comm, "comm"},
                                           Required{out_device, "out_device"});
      r != HAL_SUCCESS) {
    return r;
  }
  *out_device = comm->device;
  return HAL_SUCCESS;
}

// The public entry points, through the layers (layers/intercept.hpp).
hal_result_t hal_comm_get_unique_id(hal_comm_unique_id_t* out_id) {
  return layers::call<layers::CommGetUniqueId, comm_get_unique_id_body>(HAL_CALLER, out_id);
}

hal_result_t hal_comm_init_all(uint32_t count, const hal_device_t* devices,
                               const hal_comm_config_t* config, hal_comm_t* out_comms) {
  return layers::call<layers::CommInitAll, comm_init_all_body>(HAL_CALLER, count, devices, config,
                                                               out_comms);
}

hal_result_t hal_comm_init_rank(hal_device_t device, uint32_t nranks,
                                const hal_comm_unique_id_t* id, uint32_t rank,
                                const hal_comm_config_t* config, hal_comm_t* out_comm) {
  return layers::call<layers::CommInitRank, comm_init_rank_body>(HAL_CALLER, device, nranks, id,
                                                                 rank, config, out_comm);
}

hal_result_t hal_comm_destroy(hal_comm_t comm) {
  return layers::call<layers::CommDestroy, comm_destroy_body>(HAL_CALLER, comm);
}

hal_result_t hal_comm_abort(hal_comm_t comm) {
  return layers::call<layers::CommAbort, comm_abort_body>(HAL_CALLER, comm);
}

hal_result_t hal_comm_get_async_error(hal_comm_t comm, hal_result_t* out_error) {
  return layers::call<layers::CommGetAsyncError, comm_get_async_error_body>(HAL_CALLER, comm,
                                                                            out_error);
}

hal_result_t hal_comm_count(hal_comm_t comm, uint32_t* out_count) {
  return layers::call<layers::CommCount, comm_count_body>(HAL_CALLER, comm, out_count);
}

hal_result_t hal_comm_rank(hal_comm_t comm, uint32_t* out_rank) {
  return layers::call<layers::CommRank, comm_rank_body>(HAL_CALLER, comm, out_rank);
}

hal_result_t hal_comm_get_device(hal_comm_t comm, hal_device_t* out_device) {
  return layers::call<layers::CommGetDevice, comm_get_device_body>(HAL_CALLER, comm, out_device);
}
