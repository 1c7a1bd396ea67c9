-- Argo CD health check for inference-operator.dev/InferenceServer.
-- Install it under resource.customizations.health.inference-operator.dev_InferenceServer in argocd-cm
-- (see docs/gitops.md). It reads the kstatus conditions the operator writes.
local hs = {}

local function condition(kind)
  if obj.status == nil or obj.status.conditions == nil then
    return nil
  end
  for _, c in ipairs(obj.status.conditions) do
    if c.type == kind then
      return c
    end
  end
  return nil
end

local function is_true(c)
  return c ~= nil and c.status == "True"
end

if obj.status == nil then
  hs.status = "Progressing"
  hs.message = "Waiting for the operator to observe the server"
  return hs
end

local generation = obj.metadata and obj.metadata.generation or nil
local observed = obj.status.observedGeneration
if generation ~= nil and (observed == nil or observed < generation) then
  hs.status = "Progressing"
  hs.message = "Waiting for the operator to observe generation " .. tostring(generation)
  return hs
end

local stalled = condition("Stalled")
local reconciling = condition("Reconciling")
local degraded = condition("Degraded")
local fallback = condition("FallbackActive")
local ready = condition("Ready")

if is_true(stalled) then
  hs.status = "Degraded"
  hs.message = stalled.reason .. ": " .. (stalled.message or "")
elseif is_true(reconciling) then
  hs.status = "Progressing"
  hs.message = reconciling.message or "Rolling out"
elseif is_true(fallback) then
  hs.status = "Degraded"
  hs.message = "Ollama fallback serving: " .. (fallback.message or "")
elseif is_true(degraded) then
  hs.status = "Degraded"
  hs.message = degraded.message or degraded.reason
elseif is_true(ready) then
  hs.status = "Healthy"
  hs.message = ready.message or "Serving"
else
  hs.status = "Progressing"
  hs.message = (ready and ready.message) or "Waiting for a ready vLLM replica"
end
return hs
