-- Argo CD resource health check for autopilot.k0sproject.io/Plan (k0s autopilot).
--
-- Install it with argocd-cm.yaml beside this file (the key
-- resource.customizations.health.autopilot.k0sproject.io_Plan holds this script as it is).
-- It reads the Plan's kstatus conditions (Ready, Reconciling, Stalled) and Paused:
--   Healthy      Ready is True for the current generation: the plan Completed.
--   Degraded     Stalled is True: the plan ended another way (or is held); Stalled's message.
--   Suspended    Paused is True: an operator paused the running plan.
--   Progressing  anything else: no status yet (the leader has not taken the plan up), a
--                generation the leader has not taken up yet, or a plan that runs or waits.
-- Argo CD gives a script from argocd-cm only the base, table and package libraries (no
-- string library), so this script uses none of the others.

local health = {
  status = "Progressing",
  message = "Waiting for the autopilot leader to take the plan up",
}

local generation = obj.metadata.generation
if obj.status == nil or obj.status.conditions == nil then
  return health
end
local observed = obj.status.observedGeneration
if generation ~= nil and observed ~= nil and observed ~= generation then
  health.message = "Waiting for the autopilot leader to take up generation " .. generation
    .. " (it describes generation " .. observed .. ")"
  return health
end

local conditions = {}
for _, condition in ipairs(obj.status.conditions) do
  if condition.type ~= nil then
    conditions[condition.type] = condition
  end
end

local function holds(name)
  local condition = conditions[name]
  return condition ~= nil and condition.status == "True"
end

local function message_of(name, fallback)
  local condition = conditions[name]
  if condition ~= nil and condition.message ~= nil and condition.message ~= "" then
    return condition.message
  end
  return fallback
end

if holds("Ready") and conditions["Ready"].observedGeneration == generation then
  health.status = "Healthy"
  health.message = message_of("Ready", "The plan completed")
elseif holds("Stalled") then
  health.status = "Degraded"
  health.message = message_of("Stalled", "The plan stalled")
elseif holds("Paused") then
  health.status = "Suspended"
  health.message = message_of("Paused", "The plan is paused")
elseif holds("Reconciling") then
  health.message = message_of("Reconciling", "The plan is running")
end
return health
