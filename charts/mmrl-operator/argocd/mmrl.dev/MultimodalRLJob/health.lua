-- Argo CD health check for mmrl.dev/MultimodalRLJob.
-- Reads what the mmrl operator writes: status.observedGeneration, status.phase, status.message and the
-- kstatus-style conditions. NodeFaults (called Degraded by operators before the rename) reports node faults
-- while training carries on, so it only adds to the message and never makes the job Degraded.
-- Uses base Lua 5.1 functions only: custom checks in argocd-cm run without the string library.

local PROGRESSING_PHASES = {
  Pending = true,
  Provisioning = true,
  Queued = true,
  Running = true,
  Recovering = true,
  Exporting = true,
}
local OTHER_PHASES = { Serving = true, Succeeded = true, Failed = true, Suspended = true }

local function text(value)
  if type(value) == "string" then
    return value
  end
  return ""
end

-- The first argument that is a non-empty string, or "".
local function first(...)
  for i = 1, select("#", ...) do
    local value = text(select(i, ...))
    if value ~= "" then
      return value
    end
  end
  return ""
end

local function sentence(head, detail)
  if detail == "" then
    return head .. "."
  end
  return head .. ": " .. detail
end

local function find(conditions, kind)
  if conditions == nil then
    return nil
  end
  for _, condition in ipairs(conditions) do
    if type(condition) == "table" and condition.type == kind then
      return condition
    end
  end
  return nil
end

local function isTrue(condition)
  return condition ~= nil and condition.status == "True"
end

local function field(condition, name)
  if condition == nil then
    return nil
  end
  return condition[name]
end

local function assess(job)
  local generation = nil
  if type(job.metadata) == "table" then
    generation = job.metadata.generation
  end
  local waiting = "Waiting for the operator to observe the job."
  if generation ~= nil then
    waiting = "Waiting for the operator to observe generation " .. tostring(generation) .. "."
  end
  local status = job.status
  if status == nil then
    return "Progressing", waiting
  end
  if type(status) ~= "table" then
    return "Unknown", "The job's status is not an object, so its health cannot be read."
  end
  local observed = status.observedGeneration
  if observed == nil or (generation ~= nil and observed ~= generation) then
    return "Progressing", waiting
  end

  local conditions = status.conditions
  if conditions ~= nil and type(conditions) ~= "table" then
    return "Unknown", "The job's status.conditions is not a list, so its health cannot be read."
  end
  local phase = status.phase
  if phase == nil then
    return "Unknown", "The job's status has no phase, so its health cannot be read."
  end
  if type(phase) ~= "string" then
    return "Unknown", "The job's status.phase is not a string, so its health cannot be read."
  end
  if PROGRESSING_PHASES[phase] == nil and OTHER_PHASES[phase] == nil then
    return "Unknown", "The job reports phase " .. phase .. ", which this health check does not know."
  end
  local message = text(status.message)

  local stalled = find(conditions, "Stalled")
  local failed = find(conditions, "Failed")
  if phase == "Failed" or isTrue(stalled) then
    local head = "The job failed"
    if phase ~= "Failed" then
      head = "The job is stalled"
    end
    local source = nil
    if isTrue(stalled) then
      source = stalled
    elseif isTrue(failed) then
      source = failed
    end
    local reason = text(field(source, "reason"))
    if reason ~= "" then
      head = head .. " (" .. reason .. ")"
    end
    return "Degraded", sentence(head, first(field(source, "message"), message))
  end

  local suspended = find(conditions, "Suspended")
  if phase == "Suspended" or isTrue(suspended) then
    return "Suspended", sentence("The job is suspended", first(field(suspended, "message"), message))
  end

  if phase == "Serving" then
    local inference = find(conditions, "InferenceReady")
    local detail = first(field(inference, "message"), message)
    if isTrue(inference) then
      return "Healthy", sentence("Training finished and the adapter is being served", detail)
    end
    return "Progressing", sentence("Training finished; waiting for the inference server to become ready", detail)
  end

  if phase == "Succeeded" then
    local complete = find(conditions, "Complete")
    return "Healthy", sentence("Training finished and serving is disabled", first(field(complete, "message"), message))
  end

  local faults = find(conditions, "NodeFaults")
  if faults == nil then
    faults = find(conditions, "Degraded")
  end
  if isTrue(faults) then
    local detail = message
    local fault = text(faults.message)
    if detail ~= "" and fault ~= "" then
      detail = detail .. "; " .. fault
    elseif fault ~= "" then
      detail = fault
    end
    return "Progressing", sentence("The job is " .. phase .. " while its nodes report faults", detail)
  end
  return "Progressing", sentence("The job is " .. phase, message)
end

local hs = {}
hs.status, hs.message = assess(obj)
return hs
