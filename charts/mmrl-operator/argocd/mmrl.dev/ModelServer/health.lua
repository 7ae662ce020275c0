-- Argo CD health check for mmrl.dev/ModelServer.
-- Reads what the mmrl operator writes: status.observedGeneration, status.phase, status.message and the
-- kstatus-style conditions (Ready, Reconciling, Stalled). A server scaled to zero serves nothing on purpose, so it
-- is Suspended rather than Healthy or Degraded.
-- Uses base Lua 5.1 functions only: custom checks in argocd-cm run without the string library.

local PHASES = { Pending = true, Deploying = true, Ready = true, Degraded = true, ScaledToZero = true }

local function text(value)
  if type(value) == "string" then
    return value
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
  if type(conditions) ~= "table" then
    return nil
  end
  for _, condition in ipairs(conditions) do
    if type(condition) == "table" and condition.type == kind then
      return condition
    end
  end
  return nil
end

local function assess(server)
  local generation = nil
  if type(server.metadata) == "table" then
    generation = server.metadata.generation
  end
  local waiting = "Waiting for the operator to observe the server."
  if generation ~= nil then
    waiting = "Waiting for the operator to observe generation " .. tostring(generation) .. "."
  end
  local status = server.status
  if status == nil then
    return "Progressing", waiting
  end
  if type(status) ~= "table" then
    return "Unknown", "The server's status is not an object, so its health cannot be read."
  end
  local observed = status.observedGeneration
  if observed == nil or (generation ~= nil and observed ~= generation) then
    return "Progressing", waiting
  end
  local phase = status.phase
  if type(phase) ~= "string" then
    return "Unknown", "The server's status has no phase, so its health cannot be read."
  end
  if PHASES[phase] == nil then
    return "Unknown", "The server reports phase " .. phase .. ", which this health check does not know."
  end
  local message = text(status.message)
  local stalled = find(status.conditions, "Stalled")
  if phase == "Degraded" or (stalled ~= nil and stalled.status == "True") then
    local head = "The server is stalled"
    local reason = ""
    if stalled ~= nil then
      reason = text(stalled.reason)
      if text(stalled.message) ~= "" then
        message = text(stalled.message)
      end
    end
    if reason ~= "" then
      head = head .. " (" .. reason .. ")"
    end
    return "Degraded", sentence(head, message)
  end
  if phase == "ScaledToZero" then
    return "Suspended", sentence("The server is scaled to zero", message)
  end
  local ready = find(status.conditions, "Ready")
  if phase == "Ready" and ready ~= nil and ready.status == "True" then
    return "Healthy", sentence("The server is ready", message)
  end
  return "Progressing", sentence("The server is " .. phase, message)
end

local hs = {}
hs.status, hs.message = assess(obj)
return hs
